// SPDX-License-Identifier: GPL-3.0-or-later
#include "common/npy.h"

#include <cctype>

#include "common/error.h"

namespace ptw::core {
namespace {

// A cursor over the header dict, e.g. {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
// — the Python literal numpy writes; only the subset numpy writes is accepted.
struct Reader {
  std::string_view s;
  std::size_t at = 0;
  const std::string& file;

  [[noreturn]] void fail(const std::string& what) const {
    PTW_FAIL("\"", file, "\": bad .npy header at character ", at, ": ", what);
  }
  void space() {
    while (at < s.size() && (s[at] == ' ' || s[at] == '\t' || s[at] == '\n')) ++at;
  }
  bool peek(char c) {
    space();
    return at < s.size() && s[at] == c;
  }
  void expect(char c) {
    if (!peek(c)) fail(std::string("expected '") + c + "'");
    ++at;
  }
  std::string quoted() {
    space();
    if (at >= s.size() || (s[at] != '\'' && s[at] != '"')) fail("expected a quoted string");
    const char q = s[at++];
    const auto end = s.find(q, at);
    if (end == std::string_view::npos) fail("unterminated string");
    std::string out(s.substr(at, end - at));
    at = end + 1;
    return out;
  }
  bool boolean() {
    space();
    if (s.substr(at, 4) == "True") return at += 4, true;
    if (s.substr(at, 5) == "False") return at += 5, false;
    fail("expected True or False");
  }
  std::int64_t integer() {
    space();
    const std::size_t start = at;
    std::int64_t v = 0;
    while (at < s.size() && std::isdigit(static_cast<unsigned char>(s[at]))) {
      const int d = s[at] - '0';
      if (v > (std::int64_t(1) << 48) / 10) fail("dimension too large");
      v = v * 10 + d;
      ++at;
    }
    if (at == start) fail("expected a dimension (an integer >= 0)");
    if (at < s.size() && s[at] == 'L') ++at;  // Python 2 wrote 3L
    return v;
  }
  std::vector<std::int64_t> tuple() {
    expect('(');
    std::vector<std::int64_t> dims;
    while (!peek(')')) {
      dims.push_back(integer());
      if (!peek(',')) break;
      ++at;
    }
    expect(')');
    return dims;
  }
};

}  // namespace

std::int64_t NpyHeader::count() const {
  std::uint64_t n = 1;  // unsigned: a (huge, huge, 0) shape wraps instead of overflowing
  for (auto d : shape) n *= static_cast<std::uint64_t>(d);
  return static_cast<std::int64_t>(n);
}

NpyHeader parseNpyHeader(std::string_view bytes, const std::string& file) {
  PTW_CHECK(bytes.size() >= 10 && bytes.substr(0, 6) == "\x93NUMPY", "\"", file,
            "\": not a .npy file (expected the magic \\x93NUMPY; save it with numpy.save)");
  const auto major = static_cast<unsigned char>(bytes[6]), minor = static_cast<unsigned char>(bytes[7]);
  PTW_CHECK((major == 1 || major == 2) && minor == 0, "\"", file, "\": .npy format version ", int(major), ".",
            int(minor), ", expected 1.0 or 2.0");
  auto byte = [&](std::size_t i) { return static_cast<std::size_t>(static_cast<unsigned char>(bytes[i])); };
  std::size_t headerLen = 0, start = 0;
  if (major == 1) {
    headerLen = byte(8) | byte(9) << 8;
    start = 10;
  } else {
    PTW_CHECK(bytes.size() >= 12, "\"", file, "\": truncated .npy header");
    headerLen = byte(8) | byte(9) << 8 | byte(10) << 16 | byte(11) << 24;
    start = 12;
  }
  PTW_CHECK(headerLen <= bytes.size() - start, "\"", file, "\": truncated .npy header: it says ", headerLen,
            " bytes, the file has ", bytes.size() - start, " after the preamble");
  Reader r{bytes.substr(start, headerLen), 0, file};
  NpyHeader h;
  bool haveDescr = false, haveOrder = false, haveShape = false, fortran = false;
  r.expect('{');
  while (!r.peek('}')) {
    const std::string key = r.quoted();
    r.expect(':');
    if (key == "descr" && !haveDescr) {
      h.descr = r.quoted();
      haveDescr = true;
    } else if (key == "fortran_order" && !haveOrder) {
      fortran = r.boolean();
      haveOrder = true;
    } else if (key == "shape" && !haveShape) {
      h.shape = r.tuple();
      haveShape = true;
    } else {
      r.fail("unexpected or repeated key '" + key + "' (expected descr, fortran_order, shape)");
    }
    if (!r.peek(',')) break;
    ++r.at;
  }
  r.expect('}');
  PTW_CHECK(haveDescr && haveOrder && haveShape, "\"", file,
            "\": the .npy header lacks one of descr, fortran_order, shape");
  PTW_CHECK(!fortran, "\"", file,
            "\": the array is in Fortran order; save a C-order array (numpy.ascontiguousarray) instead");
  if (h.descr == "<f4") {
    h.itemSize = 4;
  } else if (h.descr == "<f8" || h.descr == "<i8") {
    h.itemSize = 8;
  } else {
    PTW_FAIL("\"", file, "\": unsupported dtype '", h.descr,
             "'; expected float32 ('<f4'), float64 ('<f8') or int64 ('<i8'), little-endian");
  }
  h.dataOffset = start + headerLen;
  const std::size_t have = bytes.size() - h.dataOffset;
  std::size_t need = h.itemSize;
  for (auto d : h.shape) {
    const auto ud = static_cast<std::size_t>(d);
    PTW_CHECK(ud == 0 || need <= have / ud, "\"", file, "\": truncated: the shape needs more than the ", have,
              " data bytes the file has");
    need *= ud;
  }
  PTW_CHECK(need == have, "\"", file, "\": ", have, " data bytes, but shape and dtype '", h.descr, "' need ", need,
            have < need ? " (truncated)" : " (trailing bytes)");
  return h;
}

}  // namespace ptw::core
