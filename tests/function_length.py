#!/usr/bin/env python3
"""Style.FunctionLength: no function of the library, the service or the CLI is over 100 lines.

  function_length.py ROOT    lists every function definition in src/, service/ and cli/
                             (*.cc; not *_test.cc, nor files under a tests/ directory) that
                             is over 100 lines, from its signature's first line to its
                             closing brace. Exits 1 when it lists any.

service/bench/ (load generators) and service/fuzz/ (fuzz targets) are in scope: they are
programs of the repository like the others, and the same reading applies to them.

A function that has a reason to be longer says so in the comment right above it (in the
block of // lines that ends on the line before its signature):

    // long: <the reason>

A marker without a reason, or one above no function over 100 lines (a function since
split, or a marker in the wrong place), is a finding too, so markers do not outlive
their reason.

Reading: comments, string and character literals (raw strings too) and preprocessor lines
are blanked first, so braces in them do not count; then braces are matched. At namespace
scope and in class bodies, a brace opens a function body when what precedes it is a
declarator: a parameter list followed only by qualifiers (const, noexcept, override,
-> type, ...) or by a constructor's member initialisers. Namespace-scope lambdas and
variable initialisers are not functions here (an initialiser's `=` tells them apart).
Everything inside a function body (lambdas, local classes) counts toward that function.

The check first runs on a probe it must reject, so a check that cannot fail fails.
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from docs_check import read_all, tracked_files  # noqa: E402  (the files git tracks, one reader)

MAX_LINES = 100
DIRS = ("src/", "service/", "cli/")
MARKER = re.compile(r"^\s*//\s*long:(.*)$")
QUALIFIERS = re.compile(
    r"(?:(?:const|volatile|noexcept|override|final|mutable|try|&&|&|\[\[.*?\]\])\s*)*"
    r"(?:->.*|requires\b.*)?", re.S)
NOT_NAMES = {"if", "for", "while", "switch", "catch", "return", "sizeof", "decltype",
             "alignas", "noexcept", "requires", "static_assert", "__attribute__"}


def blank(text):
    """text with comments, string and character literals and preprocessor lines turned
    into spaces (newlines kept, so line numbers hold)."""
    out = list(text)
    n = len(text)
    i = 0
    line_start = True  # only whitespace since the last newline

    def wipe(a, b):
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = text[i]
        if c == "\n":
            line_start = True
            i += 1
            continue
        if line_start and c == "#":
            j = i
            while j < n and (text[j] != "\n" or text[j - 1] == "\\"):
                j += 1
            wipe(i, j)
            i = j
            continue
        if not c.isspace():
            line_start = False
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            wipe(i, j)
            i = j
            continue
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            wipe(i, j)
            i = j
            continue
        if c in "\"'":
            k = i
            while k > 0 and (text[k - 1].isalnum() or text[k - 1] == "_"):
                k -= 1
            prefix = text[k:i]
            if c == "'" and prefix not in ("", "u8", "u", "U", "L"):
                i += 1  # a digit separator: 1'000'000
                continue
            if c == '"' and prefix.endswith("R") and prefix in ("R", "u8R", "uR", "UR", "LR"):
                m = re.compile(r'"([^()\\\s]{0,16})\(').match(text, i)
                if m:
                    end = text.find(")" + m.group(1) + '"', m.end())
                    end = n if end < 0 else end + len(m.group(1)) + 2
                    wipe(i + 1, end - 1)
                    i = end
                    continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            wipe(i + 1, min(j, n))
            i = j + 1
            continue
        i += 1
    return "".join(out)


def top_level_parens(head):
    """(open, close) index pairs of the parenthesis groups of head at depth 0."""
    groups, depth, start = [], 0, 0
    for k, ch in enumerate(head):
        if ch == "(":
            if depth == 0:
                start = k
            depth += 1
        elif ch == ")" and depth > 0:
            depth -= 1
            if depth == 0:
                groups.append((start, k))
    return groups


def classify(head):
    """What a '{' opens, from the text before it since the last ';', '{' or '}' of its
    scope: 'namespace', 'class', 'function', 'init' (a brace in a constructor's member
    initialisers), or 'other' (an initialiser, an enum, anything else)."""
    h = head.strip()
    while True:  # access labels of a class body
        m = re.match(r"(?:public|private|protected)\s*:(?!:)\s*", h)
        if not m:
            break
        h = h[m.end():]
    h = re.sub(r"\[\[.*?\]\]", " ", h, flags=re.S).strip()
    if re.match(r"(?:inline\s+)?namespace\b", h) or re.match(r'extern\s*"', h):
        return "namespace", h
    bare = re.sub(r"^template\s*<.*?>\s*(?=[A-Za-z_])", "", h, flags=re.S)
    if re.match(r"enum\b", bare):
        return "other", h
    if re.match(r"(?:class|struct|union)\b", bare):
        return "class", h
    flat = re.sub(r"\boperator\s*\(\s*\)", "operator_call", h)
    groups = top_level_parens(flat)
    if not groups:
        return "other", h
    if "=" in re.sub(r"\boperator\s*[^\s(]+", "operator_", flat[:groups[0][0]]):
        return "other", h  # an initialiser: `auto f = [](...) {`, `T x = T(...) {`
    rest = flat[groups[-1][1] + 1:].strip()
    if QUALIFIERS.fullmatch(rest):
        return "function", h
    for _, close in groups:  # a constructor's member initialisers
        after = flat[close + 1:].lstrip()
        after = re.sub(r"^(?:(?:noexcept|const|try)\s*)*", "", after)
        if after.startswith(":") and not after.startswith("::"):
            last = flat.rstrip()[-1:]
            return ("function" if last in (")", "}") else "init"), h
    return "other", h


def function_name(h):
    flat = re.sub(r"\boperator\s*\(\s*\)", "operator()", re.sub(r"\s+", " ", h))
    for m in re.finditer(r"((?:[\w~]+(?:<[^(){};]*>)?::)*(?:operator\s*[^\s(]+|~?\w+)|operator\(\))\s*\(",
                         flat):
        name = m.group(1)
        if name.split("::")[-1] not in NOT_NAMES:
            return name
    return flat[:60]


def long_functions(path, text):
    """Findings of one file: 'path:line: ...'."""
    code = blank(text)
    lines = text.split("\n")
    findings, functions = [], []   # functions: (first line, lines, name)
    scopes = ["namespace"]          # what each open brace opened
    head_start = 0
    i, n = 0, len(code)
    while i < n:
        c = code[i]
        if c in ";}":
            if c == "}":
                if len(scopes) == 1:
                    findings.append(f"{path}:{code.count(chr(10), 0, i) + 1}: a '}}' closes nothing; "
                                    "the check cannot read this file")
                    return findings
                scopes.pop()
            head_start = i + 1
        elif c == "{":
            head = code[head_start:i]
            kind, h = classify(head)  # a scope on the stack is a namespace or a class body
            close = matching_brace(code, i) if kind in ("function", "other", "init") else None
            if close is None and kind != "namespace" and kind != "class":
                findings.append(f"{path}:{code.count(chr(10), 0, i) + 1}: a '{{' closes nowhere; "
                                "the check cannot read this file")
                return findings
            if kind == "function":
                offset = len(head) - len(head.lstrip())
                first = code.count("\n", 0, head_start + offset) + 1
                first += len(re.match(r"\s*(?:(?:public|private|protected)\s*:(?!:)\s*)*",
                                      head[offset:]).group(0).split("\n")) - 1
                last = code.count("\n", 0, close) + 1
                functions.append((first, last - first + 1, function_name(h)))
            if kind in ("namespace", "class"):
                scopes.append(kind)
                head_start = i + 1
            elif kind == "init":
                i = close + 1  # the head goes on: more initialisers, then the body
                continue
            else:
                i = close + 1
                head_start = i
                continue
        i += 1
    if len(scopes) != 1:
        findings.append(f"{path}: a '{{' is never closed; the check cannot read this file")
        return findings

    markers = {}
    for number, line in enumerate(lines, 1):
        m = MARKER.match(line)
        if m:
            markers[number] = m.group(1).strip()
    for first, count, name in functions:
        marker = None
        k = first - 1
        while k >= 1 and lines[k - 1].strip().startswith("//"):
            if k in markers:
                marker = k
            k -= 1
        if marker is not None:
            reason = markers.pop(marker)
            if not reason:
                findings.append(f"{path}:{marker}: '// long:' above {name} gives no reason")
            elif count <= MAX_LINES:
                findings.append(f"{path}:{marker}: '// long:' above {name}, which is {count} "
                                f"line{'' if count == 1 else 's'} (not over {MAX_LINES}): "
                                "remove the marker")
            continue
        if count > MAX_LINES:
            findings.append(f"{path}:{first}: {name} is {count} lines (over {MAX_LINES}): split it "
                            "along its steps, or state why not in a '// long: <reason>' comment "
                            "right above it")
    for number in sorted(markers):
        findings.append(f"{path}:{number}: '// long:' is not right above a function definition")
    return findings


def matching_brace(code, i):
    depth = 0
    for k in range(i, len(code)):
        if code[k] == "{":
            depth += 1
        elif code[k] == "}":
            depth -= 1
            if depth == 0:
                return k
    return None


def in_scope(path):
    return (path.startswith(DIRS) and path.endswith(".cc") and not path.endswith("_test.cc")
            and "/tests/" not in "/" + path)


def probe():
    """A file the check must flag exactly: long functions at namespace scope, out of line,
    a constructor with brace initialisers, one whose braces in literals and comments
    would end it early or late if counted, a marker without a reason, a stale one."""
    body = "  x += 1;\n" * 100
    text = (
        "namespace a {\n"
        "namespace {\n"
        "int Short() { return 1; }\n"
        "int Long(int x) {\n" + body + "  return x;\n}\n"
        "}  // namespace\n"
        "const auto kLambda = [](int x) {\n" + body + "  return x;\n};\n"
        "struct S {\n  int Inline() const { return 2; }\n  int n{0};\n};\n"
        "int S::Member(int x) const {\n" + body + "  return x;\n}\n"
        "S::S(int x)\n    : n{x}, m_(x) {\n" + body + "}\n"
        "int Tricky() {\n  const char* s = \"}}}\";  // }\n  char c = '}';\n"
        "  int k = 1'000;\n  /* } */ const char* r = R\"x(}\")x\";\n" + body + "  return 0;\n}\n"
        "// Documented.\n// long: a table of cases that reads best in one place\n"
        "int Allowed() {\n" + body + "}\n"
        "// long:\nint NoReason() {\n" + body + "}\n"
        "// long: once was long\nint Stale() { return 0; }\n"
        "}  // namespace a\n")
    got = long_functions("p.cc", text)
    want = ["p.cc:4: Long is 103 lines", "p.cc:215: S::Member is 103 lines",
            "p.cc:318: S::S is 103 lines", "p.cc:421: Tricky is 107 lines",
            "p.cc:632: '// long:' above NoReason gives no reason",
            "p.cc:735: '// long:' above Stale, which is 1 line"]
    if len(got) != len(want) or not all(g.startswith(w) for g, w in zip(got, want)):
        sys.exit("the function length check did not flag its probe exactly:\n  " +
                 "\n  ".join(got))


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    root = sys.argv[1]
    probe()
    bad = []
    files = read_all(root, [f for f in tracked_files(root) if in_scope(f)])
    for path in sorted(files):
        bad += long_functions(path, files[path])
    for line in bad:
        print(line)
    print(f"function length check: {len(bad)} finding(s)")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
