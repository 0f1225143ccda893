#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""No function in core/, ui/ or app/ is longer than LIMIT lines (from the line that opens its body to
the one that closes it), except the data tables named with --table: a long function is hard to
read and to test, a table of rows is not. A light scanner, not a parser: it blanks comments and
literals, follows braces, and counts a block as a function when what precedes its `{` ends in a
parameter list (after qualifiers and a trailing return type). It first checks itself on a sample.
Usage: function_length.py SOURCE_DIR LIMIT [--table NAME]... ; exits 1 naming each long function."""
import pathlib
import re
import sys

CONTROL = re.compile(r"\b(if|for|while|switch|catch|do|else|try)\s*$")


def strip(src):
    # Comments, string and character literals become spaces; newlines are kept so lines still count.
    out, i, n = [], 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i)); i = j
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", src[i:j])); i = j
        elif src.startswith('R"', i) and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            m = re.match(r'R"([^(\s]*)\(', src[i:])
            end = src.find(")" + m.group(1) + '"', i) if m else -1
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append(re.sub(r"[^\n]", " ", src[i:j])); i = j
        elif c in "\"'":
            j = i + 1
            while j < n and src[j] != c:
                j += 2 if src[j] == "\\" else 1
            out.append(re.sub(r"[^\n]", " ", src[i:j + 1])); i = j + 1
        else:
            out.append(c); i += 1
    return "".join(out)


def is_function_header(head):
    head = head.strip()
    if not head or head.endswith("=") or head.endswith(",") or head.endswith("(") or head.endswith("return"):
        return False
    if re.match(r"^(namespace|class|struct|union|enum|extern)\b", head) or re.search(r"\b(class|struct|union|enum)\s+\w*\s*(final\s*)?(:[^()]*)?$", head):
        return False
    # Strip what may follow a parameter list: qualifiers, noexcept, override, trailing return type.
    h = re.sub(r"(\b(const|noexcept|override|final|mutable|volatile)\b|->\s*[\w:<>,\s*&]+|&&|&)\s*$", "", head).strip()
    while h != head:
        head = h
        h = re.sub(r"(\b(const|noexcept|override|final|mutable|volatile)\b|->\s*[\w:<>,\s*&]+|&&|&)\s*$", "", head).strip()
    ctor = re.search(r"\)\s*(noexcept\s*)?:(?!:)", head)
    if ctor:  # a constructor's initialiser list: complete (not inside `m_w{`), judge what precedes it
        if not re.search(r"[)}]\s*$", head):
            return False
        head = head[: ctor.start() + 1]
    if not head.endswith(")"):
        return False
    # The name before the parameter list: an identifier, an operator, or a lambda's ].
    depth, k = 0, len(head) - 1
    while k >= 0:
        if head[k] == ")": depth += 1
        elif head[k] == "(":
            depth -= 1
            if depth == 0: break
        k -= 1
    before = head[:k].rstrip()
    if CONTROL.search(before) or before.endswith("]") or not before:
        return False
    return bool(re.search(r"(\w|operator\s*\S+|>)$", before))


def functions(src):
    text = strip(src)
    stack = []  # (kind, start line)
    line, last, inside = 1, 0, 0
    for i, c in enumerate(text):
        if c == "\n":
            line += 1
        elif c == "{":
            head = text[last:i]
            kind = "block"
            if inside == 0 and is_function_header(head):
                kind = "func"
                inside += 1
            elif inside == 0 and re.search(r"\w\s*$", head) and not re.match(r"\s*(namespace|class|struct|enum|union|extern)\b", head.split(";")[-1]) and not re.search(r"\b(class|struct|union|enum)\b", head):
                kind = "init"  # a brace initialiser (m_w{v}): the statement goes on after it
            stack.append((kind, line))
            if kind != "init":
                last = i + 1
        elif c == "}":
            if stack:
                kind, start = stack.pop()
                if kind == "func":
                    inside -= 1
                    yield start, line, None
                if kind != "init":
                    last = i + 1
            else:
                last = i + 1
        elif c == ";":
            last = i + 1


SAMPLE = """
namespace a {
struct Row { int x; };
const std::vector<Row>& rows() {
%s}
Thing::Thing(int v) : m_v(v), m_w{v} {
%s}
int shortOne() { return 1; }
auto f = [](int x) {
%s};
}  // namespace a
""" % ("  {1},\n" * 120, "  call(\"}\"); // }\n" * 120, "  x++;\n" * 120)


def long_functions(path, text, limit, tables):
    lines = text.split("\n")
    for start, end, _ in functions(text):
        head = lines[start - 1].strip()
        if end - start + 1 > limit and not any(re.search(r"\b" + t + r"\s*\(", head) for t in tables):
            yield f"{path}:{start}: {end - start + 1} lines: {head[:100]}"


def main():
    args = sys.argv[1:]
    source, limit = args[0], int(args[1])
    tables = [args[i + 1] for i, a in enumerate(args) if a == "--table"]
    # The sample: the constructor is long; the table is named; a lambda at namespace scope is no function.
    found = list(long_functions("sample", SAMPLE, 100, ["rows"]))
    if len(found) != 1 or "Thing::Thing" not in found[0]:
        print("FAIL: the scanner misreads its sample:", found)
        return 1
    bad = []
    for top in ("core", "ui", "app"):
        for path in sorted(pathlib.Path(source, top).rglob("*")):
            if path.suffix in (".cpp", ".h"):
                bad += long_functions(path.relative_to(source), path.read_text(encoding="utf-8"), limit, tables)
    print("\n".join(bad + [f"function_length: {len(bad)} function(s) over {limit} lines"]))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
