#!/usr/bin/env python3
"""Every code block of README.md and docs/*.md, compiled, run or checked, so the docs
cannot drift from the code (docs/development.md, The docs test).

  docs_blocks.py list   SOURCE                 each block and what the test does with it
  docs_blocks.py blocks SOURCE BUILD BIN       Docs.Blocks: C++, shell, YAML, JSON, ...
  docs_blocks.py serve  SOURCE BUILD BIN       Docs.Serve: `make serve` on free ports, the
                                               blocks that call sluiced's listeners, SIGINT

What each fence language gets:

  cpp       compiled against the library as a consumer sees it: BUILD installed
            (`cmake --install`) into a temporary prefix, one generated CMake project that
            finds it with find_package(sluice) (the `cmake` blocks are that project's
            lines), every program built at -O0 through ccache in one parallel build. A
            block with `int main` is a program; any other block is the body of main (its
            #include lines at file scope). A block preceded by <!-- continues --> is
            appended to the page's previous C++ block, in a scope of its own (it sees
            that block's names, and its own end with it): the two are one program.
            A program runs (exit 0 within 20 s) against a private redis-server on a free
            loopback port, then again with nothing at that address (it must end by
            itself, with any exit code, never by a signal), when every Redis address in
            it is localhost:6379 or 127.0.0.1:6379: those addresses are swapped for the
            private server's at run time. A program naming another host is compiled only.
  cmake     the generated project's lines, after add_executable(app ...) of the page's
            first program.
  sh        run by bash -euo pipefail from the checkout's root (exit 0 within 60 s), with
            build/bin first in PATH and SLUICE_REDIS_URL / SLUICED_REDIS naming the private
            redis-server; localhost:6379 and 127.0.0.1:6379 are rewritten to its port.
            Blocks that call sluiced's documented listeners (localhost:8080..8083) are
            Docs.Serve's: run against `make serve` on free ports, the ports rewritten.
  yaml      a sluiced config (a top-level `domain`) is checked by `sluiced --check-config`;
            any other (Envoy's, Kubernetes') must parse.
  json, toml
            must parse.
  js, python, go
            syntax-checked (node --check, py_compile, gofmt -e) where the tool is
            installed; skipped with a message where it is not.
  text      output, layouts and diagrams: shown, not checked, except a block preceded by
            <!-- output -->, which must be exactly what the runnable block before it
            printed.

A block preceded by <!-- partial: WHY --> (deliberately incomplete) or <!-- not run: WHY -->
(complete, but it installs packages, starts systemd units, needs other hosts or runs for
minutes) is skipped; the reason is required. A fence without a language, a language the
test does not know, or an indented code block fails: every block says what it is.
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import tomllib

FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([^\s`]*)\s*$")
MARKER = re.compile(r"^<!--\s*(partial|not run|continues|output)\s*(?::\s*(.*?))?\s*-->\s*$")
LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s")
SHELL = {"sh", "bash", "shell"}
SHOWN = {"text"}
SYNTAX = {"js": (["node", "--check"], ".js"), "javascript": (["node", "--check"], ".js"),
          "python": (["python3", "-m", "py_compile"], ".py"), "go": (["gofmt", "-e"], ".go")}
KNOWN = {"cpp", "cmake", "yaml", "json", "toml"} | SHELL | SHOWN | set(SYNTAX)
# The Redis address the docs use, swapped for the private server's.
REDIS_ADDRESS = re.compile(r"\b(?:localhost|127\.0\.0\.1):6379\b")
# sluiced's documented listeners: HTTP, gRPC, admin, metrics.
SLUICED_PORTS = {"8080": "HTTP_PORT", "8081": "GRPC_PORT", "8082": "ADMIN_PORT",
                 "8083": "METRICS_PORT"}
SLUICED_ADDRESS = re.compile(r"\b(localhost|127\.0\.0\.1):(808[0-3])\b")
URL = re.compile(r"\b(?:redis|rediss|unix)(?:\+\w+)?://[^\"'\s]*")


class Block:
    def __init__(self, path, line, lang, text, marker, reason):
        self.path, self.line, self.lang, self.text = path, line, lang, text
        self.marker, self.reason = marker, reason

    def where(self):
        return f"{self.path}:{self.line}"


def doc_files(root):
    files = ["README.md"] + sorted(
        os.path.join("docs", f) for f in os.listdir(os.path.join(root, "docs")) if f.endswith(".md"))
    return [f for f in files if os.path.exists(os.path.join(root, f))]


def extract(root, path, errors):
    """The fenced blocks of one Markdown file; indented code blocks are errors."""
    lines = open(os.path.join(root, path), encoding="utf-8").read().split("\n")
    blocks = []
    i = 0
    in_list = False
    while i < len(lines):
        line = lines[i]
        m = FENCE.match(line)
        if m:
            fence, lang = m.group(2), m.group(3)
            start = i
            i += 1
            body = []
            while i < len(lines) and not lines[i].strip().startswith(fence[:3]):
                body.append(lines[i][len(m.group(1)):] if lines[i].startswith(m.group(1)) else lines[i])
                i += 1
            marker = reason = None
            j = start - 1
            while j >= 0 and not lines[j].strip():
                j -= 1
            mm = MARKER.match(lines[j].strip()) if j >= 0 else None
            if mm:
                marker, reason = mm.group(1), mm.group(2)
            blocks.append(Block(path, start + 1, lang, "\n".join(body) + "\n", marker, reason))
            i += 1
            continue
        if LIST_ITEM.match(line):
            in_list = True
        elif line.strip() and not line.startswith(" "):
            in_list = False
        prev_blank = i > 0 and not lines[i - 1].strip()
        if (line.startswith("    ") and line.strip() and prev_blank and not in_list
                and not line.lstrip().startswith("|")):
            errors.append(f"{path}:{i + 1}: an indented code block: fence it and name its "
                          f"language (```sh, ```text, ...)")
            while i + 1 < len(lines) and (lines[i + 1].startswith("    ") or not lines[i + 1].strip()):
                i += 1
        i += 1
    return blocks


def all_blocks(root):
    errors = []
    blocks = []
    for path in doc_files(root):
        blocks += extract(root, path, errors)
    for b in blocks:
        if b.marker in ("partial", "not run") and not b.reason:
            errors.append(f"{b.where()}: <!-- {b.marker}: ... --> must say why")
        if not b.lang:
            errors.append(f"{b.where()}: a fence without a language: name it (```text for output)")
        elif b.lang not in KNOWN:
            errors.append(f"{b.where()}: fence language '{b.lang}' is not one the docs test "
                          f"knows ({', '.join(sorted(KNOWN))})")
    return blocks, errors


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis(work):
    port = free_port()
    d = os.path.join(work, "redis")
    os.makedirs(d, exist_ok=True)
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", d, "--logfile", os.path.join(d, "log")])
    for _ in range(200):
        if subprocess.run(["redis-cli", "-p", str(port), "ping"], capture_output=True).returncode == 0:
            return proc, port
        time.sleep(0.05)
    proc.kill()
    raise SystemExit("redis-server did not start")


def stop(proc, sig=signal.SIGTERM):
    if proc and proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# ---------------------------------------------------------------------------------------
# C++


class Program:
    def __init__(self, blocks):
        self.blocks = blocks
        self.name = "doc_" + re.sub(r"\W", "_", blocks[0].path.replace(".md", "")) + f"_{blocks[0].line}"

    def where(self):
        return " + ".join(b.where() for b in self.blocks)

    def source(self):
        """The program's text, with #line directives naming the doc lines, and every Redis
        URL literal that names localhost:6379 routed through sluice_docs::Redis (the private
        server's port, at run time: the source, and so ccache's key, is the same every run)."""
        text_all = "".join(b.text for b in self.blocks)
        has_main = re.search(r"\bint\s+main\s*\(", text_all) is not None
        head = ["// Generated by tests/docs_blocks.py from " + self.where(),
                "namespace sluice_docs { const char* Redis(const char* url); }"]
        body = []
        for b in self.blocks:
            lines = b.text.rstrip("\n").split("\n")
            seg = []
            for k, line in enumerate(lines):
                line = re.sub(r'"([^"\\]*(?:localhost|127\.0\.0\.1):6379[^"\\]*)"',
                              r'sluice_docs::Redis("\1")', line)
                if not has_main and line.startswith("#include"):
                    head += [f'#line {b.line + 1 + k} "{b.path}"', line]
                else:
                    seg.append((b.line + 1 + k, line))
            cur = None
            if b is not self.blocks[0]:
                body.append("{  // a continuing block: its own names end with it")
            for n, line in seg:
                if cur is None or n != cur + 1:
                    body.append(f'#line {n} "{b.path}"')
                body.append(line)
                cur = n
            if b is not self.blocks[0]:
                body.append("}")
        if has_main:
            return "\n".join(head + body) + "\n"
        return "\n".join(head + ["int main() {"] + body + ["  return 0;", "}"]) + "\n"

    def runs(self):
        """Why it is compiled only, or None when it runs."""
        text = "".join(b.text for b in self.blocks)
        for url in URL.findall(text):
            if url.startswith("memory://"):
                continue
            hosts = re.sub(r"^[^:]+://(?:[^@/]*@)?", "", url).split("/")[0]
            for host in hosts.split(","):
                if not REDIS_ADDRESS.fullmatch(host):
                    return f"connects to {url}"
        return None


SUPPORT = r"""// Generated by tests/docs_blocks.py: the docs' Redis address, swapped at run time for
// the private redis-server's (SLUICE_DOCS_REDIS_PORT).
#include <cstdlib>
#include <deque>
#include <regex>
#include <string>
namespace sluice_docs {
const char* Redis(const char* url) {
  static std::deque<std::string> urls;  // the pointers handed out stay valid
  const char* port = std::getenv("SLUICE_DOCS_REDIS_PORT");
  if (port == nullptr) return url;
  urls.push_back(std::regex_replace(url, std::regex("(localhost|127\\.0\\.0\\.1):6379"),
                                    std::string("127.0.0.1:") + port));
  return urls.back().c_str();
}
}  // namespace sluice_docs
"""


def programs_of(blocks, errors):
    progs = []
    last_by_page = {}
    for b in blocks:
        if b.lang != "cpp" or b.marker in ("partial", "not run"):
            continue
        if b.marker == "continues":
            prev = last_by_page.get(b.path)
            if prev is None:
                errors.append(f"{b.where()}: <!-- continues --> but no C++ block before it on the page")
                continue
            prev.blocks.append(b)
        else:
            prev = Program([b])
            progs.append(prev)
            last_by_page[b.path] = prev
    return progs


def build_programs(progs, cmake_blocks, build, work, failures):
    """Installs BUILD into work/prefix and builds every program in one project. Returns the
    names of the programs built."""
    prefix = os.path.join(work, "prefix")
    r = subprocess.run(["cmake", "--install", build, "--prefix", prefix, "--component", "dev"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit("cmake --install failed:\n" + r.stdout + r.stderr)
    proj = os.path.join(work, "project")
    os.makedirs(proj, exist_ok=True)
    # No CMAKE_CXX_STANDARD: the installed sluice::sluice carries its C++20 requirement
    # (g++ 12 defaults to C++17), as a user's project that sets none relies on.
    lines = ["cmake_minimum_required(VERSION 3.22)", "project(sluice_docs CXX)"]
    lines.append("add_library(docs_support OBJECT support.cc)")
    open(os.path.join(proj, "support.cc"), "w").write(SUPPORT)
    first = True
    for p in progs:
        open(os.path.join(proj, p.name + ".cc"), "w").write(p.source())
        target = "app" if first else p.name
        lines.append(f"add_executable({target} {p.name}.cc $<TARGET_OBJECTS:docs_support>)")
        lines.append(f"set_target_properties({target} PROPERTIES OUTPUT_NAME {p.name})")
        if first:
            for c in cmake_blocks:
                lines.append(f"# {c.where()}")
                lines.append(c.text.rstrip("\n"))
            first = False
        else:
            lines.append(f"target_link_libraries({target} PRIVATE sluice::sluice)")
    if not progs:
        return set()
    open(os.path.join(proj, "CMakeLists.txt"), "w").write("\n".join(lines) + "\n")
    out = os.path.join(work, "out")
    r = subprocess.run(["cmake", "-S", proj, "-B", out, "-G", "Ninja", f"-DCMAKE_PREFIX_PATH={prefix}",
                        "-DCMAKE_BUILD_TYPE=", "-DCMAKE_CXX_FLAGS=-O0",
                        "-DCMAKE_CXX_COMPILER_LAUNCHER=" + (shutil.which("ccache") or "")],
                       capture_output=True, text=True)
    if r.returncode != 0:
        failures.append(("cmake blocks / generated project", r.stdout + r.stderr))
        return set()
    env = dict(os.environ, CCACHE_BASEDIR=work, CCACHE_NOHASHDIR="1")
    r = subprocess.run(["cmake", "--build", out, "-j", "2", "--", "-k", "0"], capture_output=True,
                       text=True, env=env)
    built = {p.name for p in progs if os.path.exists(os.path.join(out, p.name))}
    for p in progs:
        if p.name not in built:
            # ninja's output, one "[k/n] ..." step after another: this program's failed step
            steps = re.split(r"\n(?=\[\d+/\d+\] )", r.stdout)
            mine = [s for s in steps if f"{p.name}.dir" in s and "FAILED" in s]
            failures.append((f"C++ {p.where()} does not compile",
                             "\n".join(mine)[-6000:] or r.stdout[-4000:]))
    return built


# ---------------------------------------------------------------------------------------
# Running


def run_shell(text, env, cwd, timeout=60):
    """Runs a block in a process group of its own: on timeout the whole group is killed."""
    proc = subprocess.Popen(["bash", "-euo", "pipefail", "-c", text], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=cwd,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def run_without_redis(exe, env):
    """A program run again with nothing listening at its Redis address must end by itself
    (any exit code: an error said is fine), never by a signal: a docs example that
    dereferences a failed Create's StatusOr is what a newcomer copies first. Returns what
    went wrong, or None."""
    with socket.socket() as s:  # a port that was free; nothing listens on it
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    try:
        r = subprocess.run([exe], capture_output=True, text=True, timeout=20,
                           env=dict(env, SLUICE_DOCS_REDIS_PORT=str(closed)))
    except subprocess.TimeoutExpired:
        return "still running after 20 s"
    if r.returncode < 0:
        return f"killed by signal {-r.returncode}\n{r.stdout}{r.stderr}"
    return None


def check_output(block, output_block, stdout, failures):
    if output_block is None:
        return
    want = [l.rstrip() for l in output_block.text.rstrip("\n").split("\n")]
    got = [l.rstrip() for l in stdout.rstrip("\n").split("\n")]
    if want != got:
        failures.append((f"{output_block.where()}: not what {block.where()} prints",
                         "shown:\n" + "\n".join(want) + "\nprinted:\n" + "\n".join(got)))


def output_blocks(blocks):
    """block index -> the <!-- output --> block that follows it."""
    out = {}
    for i, b in enumerate(blocks):
        if b.marker == "output" and i > 0:
            out[i - 1] = b
    return out


def is_serve_block(b):
    return b.lang in SHELL and SLUICED_ADDRESS.search(b.text) is not None


def check_yaml(b, bin_dir, work, failures):
    import yaml
    try:
        docs = list(yaml.safe_load_all(b.text))
    except yaml.YAMLError as e:
        failures.append((f"YAML {b.where()} does not parse", str(e)))
        return "failed"
    if len(docs) == 1 and isinstance(docs[0], dict) and "domain" in docs[0]:
        d = os.path.join(work, "yaml", str(b.line))
        os.makedirs(d, exist_ok=True)
        f = os.path.join(d, f"{docs[0]['domain']}.yaml")
        open(f, "w").write(b.text)
        r = subprocess.run([os.path.join(bin_dir, "sluiced"), "--check-config", f], capture_output=True,
                           text=True)
        if r.returncode != 0:
            failures.append((f"YAML {b.where()}: sluiced --check-config refuses it", r.stdout + r.stderr))
            return "failed"
        return "sluiced --check-config"
    return "parsed"


def check_syntax(b, work, failures):
    cmd, ext = SYNTAX[b.lang]
    if shutil.which(cmd[0]) is None:
        return f"skipped: {cmd[0]} is not installed"
    f = os.path.join(work, f"block_{b.line}{ext}")
    open(f, "w").write(b.text)
    r = subprocess.run(cmd + [f], capture_output=True, text=True)
    if r.returncode != 0:
        failures.append((f"{b.lang} {b.where()}: syntax", r.stdout + r.stderr))
        return "failed"
    return " ".join(cmd)


def classify(b, runs_by_block):
    """What the test does with one block, for `list` and the summary."""
    if b.marker in ("partial", "not run"):
        return f"skipped ({b.marker}: {b.reason})"
    if b.marker == "output":
        return "compared with what the block before printed"
    if b.lang == "cpp":
        return runs_by_block.get(id(b), "compiled")
    if b.lang == "cmake":
        return "lines of the generated project"
    if is_serve_block(b):
        return "run by Docs.Serve against make serve"
    if b.lang in SHELL:
        return "run"
    if b.lang == "yaml":
        return "checked (sluiced --check-config, or parsed)"
    if b.lang in ("json", "toml"):
        return "parsed"
    if b.lang in SYNTAX:
        return "syntax-checked"
    return "shown, not checked"


def cmd_list(root):
    blocks, errors = all_blocks(root)
    progs = programs_of(blocks, errors)
    runs = {}
    for p in progs:
        why = p.runs()
        for b in p.blocks:
            runs[id(b)] = f"compiled, run ({p.name})" if why is None else f"compiled only: {why}"
    for b in blocks:
        print(f"{b.where():28} {b.lang or '(none)':8} {classify(b, runs)}")
    for e in errors:
        print("error: " + e)
    return 1 if errors else 0


def cmd_blocks(root, build, bin_dir):
    t0 = time.monotonic()
    blocks, errors = all_blocks(root)
    progs = programs_of(blocks, errors)
    failures = [(e, "") for e in errors]
    counts = {}

    def count(kind):
        counts[kind] = counts.get(kind, 0) + 1

    work = os.path.join(build, "docs_blocks")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    redis, port = start_redis(work)
    try:
        built = build_programs(progs, [b for b in blocks if b.lang == "cmake" and b.marker is None],
                               build, work, failures)
        t_build = time.monotonic() - t0
        outs = output_blocks(blocks)
        index = {id(b): i for i, b in enumerate(blocks)}
        env = dict(os.environ, SLUICE_DOCS_REDIS_PORT=str(port))
        for p in progs:
            if p.name not in built:
                count("cpp: failed to compile")
                continue
            why = p.runs()
            if why:
                print(f"compiled, not run: {p.where()} ({why})")
                count("cpp: compiled only")
                continue
            try:
                r = subprocess.run([os.path.join(work, "out", p.name)], capture_output=True, text=True,
                                   env=env, timeout=20)
                ok = r.returncode == 0
                detail = f"exit {r.returncode}\n{r.stdout}{r.stderr}"
            except subprocess.TimeoutExpired:
                ok, detail = False, "still running after 20 s"
            if ok:
                print(f"compiled and ran: {p.where()}")
                count("cpp: compiled and ran")
                check_output(p.blocks[-1], outs.get(index[id(p.blocks[-1])]), r.stdout, failures)
                crash = run_without_redis(os.path.join(work, "out", p.name), env)
                if crash:
                    failures.append((f"C++ {p.where()} with no Redis at its address: {crash}", ""))
                    count("cpp: crashed with Redis down")
                else:
                    count("cpp: ran again with Redis down, no crash")
            else:
                failures.append((f"C++ {p.where()} fails when run", detail))
                count("cpp: failed when run")
        shell_env = dict(os.environ, SLUICE_REDIS_URL=f"redis://127.0.0.1:{port}",
                         SLUICED_REDIS=f"redis://127.0.0.1:{port}",
                         PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""))
        for i, b in enumerate(blocks):
            if b.lang == "cpp" or b.lang == "cmake":
                continue
            if b.marker in ("partial", "not run"):
                count(f"{b.lang}: skipped ({b.marker})")
                continue
            if b.marker == "output":
                count("text: output, compared with what the block before printed")
                continue
            if b.lang in SHELL:
                if is_serve_block(b):
                    count(f"{b.lang}: run by Docs.Serve")
                    continue
                text = REDIS_ADDRESS.sub(f"127.0.0.1:{port}", b.text)
                try:
                    r = run_shell(text, shell_env, root)
                except subprocess.TimeoutExpired:
                    failures.append((f"shell {b.where()} still running after 60 s", ""))
                    count(f"{b.lang}: failed")
                    continue
                if r.returncode != 0:
                    failures.append((f"shell {b.where()} exits {r.returncode}", r.stdout + r.stderr))
                    count(f"{b.lang}: failed")
                else:
                    print(f"ran: {b.where()}")
                    count(f"{b.lang}: ran")
                    check_output(b, outs.get(i), r.stdout, failures)
            elif b.lang == "yaml":
                count("yaml: " + check_yaml(b, bin_dir, work, failures))
            elif b.lang == "json":
                try:
                    json.loads(b.text)
                    count("json: parsed")
                except ValueError as e:
                    failures.append((f"JSON {b.where()} does not parse", str(e)))
                    count("json: failed")
            elif b.lang == "toml":
                try:
                    tomllib.loads(b.text)
                    count("toml: parsed")
                except ValueError as e:
                    failures.append((f"TOML {b.where()} does not parse", str(e)))
                    count("toml: failed")
            elif b.lang in SYNTAX:
                count(f"{b.lang}: " + check_syntax(b, work, failures))
            else:
                count(f"{b.lang or '(none)'}: shown, not checked")
        for p in progs:
            for b in p.blocks:
                if b is not p.blocks[0]:
                    count("cpp: continues another block")
    finally:
        stop(redis)
    print()
    for k in sorted(counts):
        print(f"  {counts[k]:3}  {k}")
    print(f"{len(blocks)} blocks in {len(doc_files(root))} files; {len(progs)} C++ programs built in "
          f"{t_build:.1f} s; {time.monotonic() - t0:.1f} s in all")
    for what, detail in failures:
        print(f"\nFAILED: {what}\n{detail.rstrip()}")
    return 1 if failures else 0


# ---------------------------------------------------------------------------------------
# make serve


def cmd_serve(root, build, bin_dir):
    t0 = time.monotonic()
    blocks, errors = all_blocks(root)
    failures = [(e, "") for e in errors]
    work = tempfile.mkdtemp(prefix="sluice_docs_serve.")
    ports = {name: str(free_port()) for name in SLUICED_PORTS.values()}
    env = dict(os.environ, BIN=bin_dir, SERVE_DIR=os.path.join(work, "serve"), **ports)
    script = os.path.join(root, "examples", "serve.sh")
    try:
        # A documented port in use: refused, naming the port and the variable that moves it.
        with socket.socket() as busy:
            busy.bind(("127.0.0.1", 0))
            busy.listen()
            taken = str(busy.getsockname()[1])
            r = subprocess.run([script], env=dict(env, HTTP_PORT=taken), capture_output=True, text=True,
                               timeout=60)
            if r.returncode == 0 or taken not in r.stderr or "HTTP_PORT=" not in r.stderr:
                failures.append(("serve.sh with HTTP_PORT busy: not refused with the port and "
                                 "HTTP_PORT=", f"exit {r.returncode}\n{r.stdout}{r.stderr}"))
            else:
                print("busy port refused: " + r.stderr.strip().split("\n")[0])
        log = open(os.path.join(work, "serve.log"), "w+")
        proc = subprocess.Popen([script], env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        pids = None
        for _ in range(400):
            log.seek(0)
            text = log.read()
            m = re.search(r"redis-server pid (\d+).*sluiced pid (\d+)", text)
            if m and "Ctrl-C" in text:
                pids = [int(m.group(1)), int(m.group(2))]
                break
            if proc.poll() is not None:
                break
            time.sleep(0.05)
        if pids is None:
            log.seek(0)
            raise SystemExit("serve.sh did not start:\n" + log.read())
        outs = output_blocks(blocks)
        n = 0
        for i, b in enumerate(blocks):
            if not is_serve_block(b) or b.marker in ("partial", "not run"):
                continue
            text = SLUICED_ADDRESS.sub(lambda m: f"{m.group(1)}:{ports[SLUICED_PORTS[m.group(2)]]}", b.text)
            r = run_shell(text, dict(os.environ, PATH=bin_dir + os.pathsep + os.environ["PATH"]), root)
            n += 1
            if r.returncode != 0:
                failures.append((f"shell {b.where()} against make serve exits {r.returncode}",
                                 r.stdout + r.stderr))
            else:
                print(f"ran against make serve: {b.where()}")
                check_output(b, outs.get(i), r.stdout, failures)
        if n == 0:
            failures.append(("no block calls sluiced's documented listeners", ""))
        # Ctrl-C: SIGINT to the script alone (a terminal sends it to the whole group; the
        # script must stop what it started either way).
        os.kill(proc.pid, signal.SIGINT)
        try:
            rc = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            rc = None
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        alive = [p for p in pids if os.path.exists(f"/proc/{p}") and
                 "Z" not in open(f"/proc/{p}/stat").read().split(")")[1].split()[0]]
        if rc != 0 or alive:
            log.seek(0)
            failures.append((f"serve.sh on SIGINT: exit {rc}, still running: {alive}", log.read()))
        else:
            print(f"SIGINT: serve.sh exited 0, redis-server and sluiced ({pids}) stopped")
        for p in alive:
            os.kill(p, signal.SIGKILL)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{time.monotonic() - t0:.1f} s")
    for what, detail in failures:
        print(f"\nFAILED: {what}\n{detail.rstrip()}")
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "list":
        sys.exit(cmd_list(sys.argv[2]))
    if len(sys.argv) == 5 and sys.argv[1] in ("blocks", "serve"):
        f = cmd_blocks if sys.argv[1] == "blocks" else cmd_serve
        sys.exit(f(*[os.path.abspath(a) for a in sys.argv[2:]]))
    sys.exit(__doc__)
