#!/usr/bin/env python3
"""Doxygen INPUT_FILTER for include/strata: the headers use plain `//` comments (docs/style.md B6),
which this turns into Doxygen documentation on the fly, so the API reference needs no second
comment syntax in the code:
  - a comment block right before a declaration at namespace or class scope -> `///` (brief +
    details), the file's opening block -> `/// \\file`;
  - a trailing `// ...` after a member or enumerator -> `///< ...`;
  - comments inside function bodies, lambdas and initializers stay plain comments.
The no-FMA region markers (#include ".../fp_exact_push.hpp" inside namespaces) are dropped: they
hold only pragmas, and Doxygen would look for them as headers. Comment text is escaped (\\, @, <, >, &, #, %, ::) so prose such as "<Arch, Backend>" or "x·y @ z" is
never read as a Doxygen command or an HTML tag.
  python3 tools/doxygen_filter.py FILE    (prints the filtered file)
"""
import re
import sys

SCOPE_OPEN = re.compile(r"^\s*(template\s*<.*>\s*)?(namespace|struct|class|union|enum(\s+class)?)\b[^;()]*\{\s*(//.*)?$")
ESCAPES = {"\\": "\\\\", "@": "\\@", "<": "\\<", ">": "\\>", "&": "\\&", "#": "\\#", "%": "\\%", "$": "\\$"}


def escape(text):
    # Keep `code spans` as they are (Doxygen shows them verbatim), escape the prose around them.
    # A `::` in prose is written as it stands (\::) rather than read as a link request, which
    # fails, and so fails the build, for names Doxygen cannot resolve from the comment's scope
    # ("packed_layout<Fmt>::type", "q8_0/q8_1::quantize").
    parts = re.split(r"(`[^`]*`)", text)
    return "".join(p if p.startswith("`") else "".join(ESCAPES.get(c, c) for c in p).replace("::", "\\::")
                   for p in parts)


def strip_strings(line):
    return re.sub(r"'(\\.|[^'\\])'", "''", re.sub(r'"(\\.|[^"\\])*"', '""', line))


def main(path):
    lines = open(path, encoding="utf-8").read().split("\n")
    out = []
    stack = []          # True: namespace/class scope, False: a body
    seen_code = False
    i = 0
    while i < len(lines):
        line = lines[i]
        if re.match(r'^\s*#include "strata/quant/detail/fp_exact_(push|pop)\.hpp"', line):
            out.append("")
            i += 1
            continue
        in_scope = all(stack)
        stripped = line.strip()
        if stripped.startswith("//") and in_scope:
            block = []
            while i < len(lines) and lines[i].strip().startswith("//"):
                block.append(lines[i])
                i += 1
            nxt = lines[i].strip() if i < len(lines) else ""
            if not seen_code and not out:
                indent = ""
                out.append("/// \\file")
                out.extend(indent + "/// " + escape(b.strip()[2:].strip()) for b in block)
            elif nxt and not nxt.startswith("#") and not nxt.startswith("}") and nxt != "":
                out.extend(b[: len(b) - len(b.lstrip())] + "/// " + escape(b.strip()[2:].strip()) for b in block)
            else:
                out.extend(block)
            continue
        code = strip_strings(line)
        if stripped and not stripped.startswith("#"):
            seen_code = True
        # A trailing comment after a member or enumerator at scope level documents it.
        m = re.match(r"^(\s*[^/\s].*?[;,{])\s*//\s?(.*)$", line)
        if in_scope and m and "//" in code and not stripped.startswith("//"):
            line = m.group(1) + " ///< " + escape(m.group(2))
        for ch in code.split("//", 1)[0]:
            if ch == "{":
                stack.append(bool(SCOPE_OPEN.match(code)) and all(stack))
            elif ch == "}" and stack:
                stack.pop()
        out.append(line)
        i += 1
    sys.stdout.write("\n".join(out))


if __name__ == "__main__":
    main(sys.argv[1])
