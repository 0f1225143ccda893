#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""Reads TensorBoard event files as TensorBoard would, independently of ptw's writer.

For each folder under DIR that holds files whose name contains "tfevents", checks every
record's framing (u64 length, masked CRC-32C of the length, data, masked CRC-32C of the data;
the CRCs by python3-crc32c), decodes its Event with protobuf (python3-protobuf; the messages
are declared here at run time as TensorFlow's event.proto and summary.proto declare them, no
protoc needed) and checks that protobuf encodes the decoded event to the same bytes, so that no
field is misencoded or unknown. The first event of a file must be the file version
"brain.Event:2", every other one a summary of one simple_value. Prints one line per scalar:

    FOLDER TAG STEP FLOAT32_BITS WALL_TIME

(FLOAT32_BITS in hex, WALL_TIME as Python's repr of the double) and exits 0; on the first
error says which file, record and byte offset on stderr and exits 1.
"""
import os
import struct
import sys

import crc32c
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory


def event_class():
    f = descriptor_pb2.FileDescriptorProto(name="ptw_read_tfevents.proto", package="tensorflow",
                                           syntax="proto2")
    T = descriptor_pb2.FieldDescriptorProto
    summary = f.message_type.add(name="Summary")
    value = summary.nested_type.add(name="Value")
    value.field.add(name="tag", number=1, type=T.TYPE_STRING, label=T.LABEL_OPTIONAL)
    value.field.add(name="simple_value", number=2, type=T.TYPE_FLOAT, label=T.LABEL_OPTIONAL)
    summary.field.add(name="value", number=1, type=T.TYPE_MESSAGE, label=T.LABEL_REPEATED,
                      type_name=".tensorflow.Summary.Value")
    event = f.message_type.add(name="Event")
    event.oneof_decl.add(name="what")
    event.field.add(name="wall_time", number=1, type=T.TYPE_DOUBLE, label=T.LABEL_OPTIONAL)
    event.field.add(name="step", number=2, type=T.TYPE_INT64, label=T.LABEL_OPTIONAL)
    event.field.add(name="file_version", number=3, type=T.TYPE_STRING, label=T.LABEL_OPTIONAL,
                    oneof_index=0)
    event.field.add(name="summary", number=5, type=T.TYPE_MESSAGE, label=T.LABEL_OPTIONAL,
                    type_name=".tensorflow.Summary", oneof_index=0)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    descriptor = pool.FindMessageTypeByName("tensorflow.Event")
    if hasattr(message_factory, "GetMessageClass"):
        return message_factory.GetMessageClass(descriptor)
    return message_factory.MessageFactory(pool).GetPrototype(descriptor)


def masked(data):
    crc = crc32c.crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


class Bad(Exception):
    pass


def read_file(path, folder, Event, out):
    with open(path, "rb") as f:
        raw = f.read()
    at, index = 0, 0
    while at < len(raw):
        where = "%s: record %d at byte %d" % (path, index, at)
        if len(raw) - at < 12:
            raise Bad(where + ": a header cut short (%d bytes)" % (len(raw) - at))
        header = raw[at:at + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", raw[at + 8:at + 12])
        if length_crc != masked(header):
            raise Bad(where + ": length CRC %08x, expected %08x" % (length_crc, masked(header)))
        if len(raw) - at - 12 < length + 4:
            raise Bad(where + ": data cut short (length %d)" % length)
        data = raw[at + 12:at + 12 + length]
        (data_crc,) = struct.unpack("<I", raw[at + 12 + length:at + 16 + length])
        if data_crc != masked(data):
            raise Bad(where + ": data CRC %08x, expected %08x" % (data_crc, masked(data)))
        event = Event()
        try:
            event.ParseFromString(data)
        except Exception as e:  # protobuf's DecodeError
            raise Bad(where + ": not an Event (%s)" % e)
        if event.SerializeToString() != data:
            raise Bad(where + ": protobuf encodes the decoded Event differently (a misencoded field)")
        if not event.HasField("wall_time"):
            raise Bad(where + ": no wall_time")
        if index == 0:
            if event.WhichOneof("what") != "file_version" or event.file_version != "brain.Event:2":
                raise Bad(where + ": the first event is not file_version brain.Event:2")
        else:
            if event.WhichOneof("what") != "summary" or len(event.summary.value) != 1:
                raise Bad(where + ": not a summary of one value")
            v = event.summary.value[0]
            if not v.HasField("tag") or not v.HasField("simple_value") or not event.HasField("step"):
                raise Bad(where + ": a scalar needs a tag, a simple_value and a step")
            bits = struct.unpack("<I", struct.pack("<f", v.simple_value))[0]
            out.append("%s %s %d %08x %r" % (folder, v.tag, event.step, bits, event.wall_time))
        at += 16 + length
        index += 1
    if index == 0:
        raise Bad(path + ": empty")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: read_tfevents.py DIR")
    root = sys.argv[1]
    Event = event_class()
    out = []
    try:
        found = False
        for folder in sorted(os.listdir(root)):
            if not os.path.isdir(os.path.join(root, folder)):
                continue
            for name in sorted(os.listdir(os.path.join(root, folder))):
                if "tfevents" in name:
                    found = True
                    read_file(os.path.join(root, folder, name), folder, Event, out)
        if not found:
            raise Bad(root + ": no event files")
    except Bad as e:
        print("read_tfevents: %s" % e, file=sys.stderr)
        sys.exit(1)
    sys.stdout.write("".join(line + "\n" for line in out))


if __name__ == "__main__":
    main()
