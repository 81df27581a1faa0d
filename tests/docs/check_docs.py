#!/usr/bin/env python3
"""Checks on the repository's text, run by ctest (tests/docs/CMakeLists.txt).

  check_docs.py wording SOURCE_DIR
      The docs, README, NEWS, sources, headers, benchmarks, scripts, man pages, contrib, the
      sample configuration, the unit and the CMake files speak of
      the software and of dated measurements, not of how the work on it was organised: none of
      the words and references PROCESS_WORDS lists, and no file named after a numbered round of
      work (docs/eval-kernel-...-s6/).

  check_docs.py names SOURCE_DIR
      Every relative link of the Markdown files under docs/ and of README.md and NEWS.md, and every
      `docs/...` path they quote, exists. docs/tuning.md describes every tuner.* key of the
      tuner's table. Every configuration key, varlink method or error and
      Prometheus metric that docs/*.md,
      README.md and the man pages name exists in the code: the schema in src/daemon/config.cpp
      (plus the kernel parameters of HALTPOLL_PARAMS
      and the `config` rows of for_each_tuner_param in src/daemon/tuner_params.hpp), the IDL in
      src/daemon/control/control_service.cpp and src/varlink/varlink.cpp, and the families that
      src/daemon/control/prometheus.cpp writes (plus the ones it generates from
      HALTPOLL_WORKER_COUNTERS and HALTPOLL_PARAMS).

Exit status 0 when clean, 1 with one line per finding (file:line: what) otherwise. Python 3
standard library only.
"""

import os
import re
import sys

WORDING_ROOTS = ["docs", "README.md", "NEWS.md", "src", "include", "bench", "scripts", "man", "contrib", "config",
                 "systemd", "cmake", "CMakeLists.txt"]
BINARY_EXTS = {".png", ".xz", ".gz", ".svg", ".ico", ".pdf", ".o", ".a", ".so"}

# Whole words only: "bpf_helpers.h" (libbpf's header) and CMake's "CMakePackageConfigHelpers"
# are names of other projects' files and do not match, so no allow-list is needed for them.
PROCESS_WORDS = [
    (re.compile(r"\bsessions?\b", re.I), "\"session\""),
    (re.compile(r"\bhelpers?\b", re.I), "\"helper\""),
    (re.compile(r"\btrackers?\b", re.I), "\"tracker\""),
    (re.compile(r"\bissues?\s*(#\s*)?\d+", re.I), "a tracker issue number"),
    (re.compile(r"\bissue\s+item\b", re.I), "a tracker issue item"),
    (re.compile(r"\bthe\s+issue\b", re.I), "\"the issue\""),
]
# A file or directory named after a numbered round of work (plot-s5.png, eval-...-s6/) rather than
# by the date and time of what it holds.
PROCESS_FILE_NAME = re.compile(r"(^|[-_])(s|session)\d+($|[-_.])", re.I)


def text_files(src, roots):
    for root in roots:
        top = os.path.join(src, root)
        if os.path.isfile(top):
            yield top
            continue
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames.sort()
            for f in sorted(filenames):
                if os.path.splitext(f)[1].lower() not in BINARY_EXTS:
                    yield os.path.join(dirpath, f)


def read_lines(path):
    with open(path, encoding="utf-8", errors="replace") as fh:
        return fh.read().split("\n")


def check_wording(src):
    findings = []
    for must in ("docs", "src", "README.md"):
        if not os.path.exists(os.path.join(src, must)):
            return [f"{src}: no {must}; not the source tree"]
    for root in WORDING_ROOTS:
        top = os.path.join(src, root)
        if not os.path.isdir(top):
            continue
        for dirpath, dirnames, filenames in os.walk(top):
            for name in dirnames + filenames:
                if PROCESS_FILE_NAME.search(os.path.splitext(name)[0]):
                    findings.append(f"{os.path.relpath(os.path.join(dirpath, name), src)}: named after a round of work")
    for path in text_files(src, WORDING_ROOTS):
        rel = os.path.relpath(path, src)
        for n, line in enumerate(read_lines(path), 1):
            for rx, what in PROCESS_WORDS:
                m = rx.search(line)
                if m:
                    findings.append(f"{rel}:{n}: {what}: ...{line[max(0, m.start() - 40):m.end() + 40].strip()}...")
    return findings


# ---- names the docs use, against the code ----

def read(src, rel):
    with open(os.path.join(src, rel), encoding="utf-8") as fh:
        return fh.read()


def haltpoll_params(src):
    """(name, kind) of every row of HALTPOLL_PARAMS (include/haltpoll/governor.hpp)."""
    text = read(src, "include/haltpoll/governor.hpp")
    block = text[text.index("#define HALTPOLL_PARAMS(X)"):]
    block = block[:block.index("\n\n")]
    return re.findall(r"X\((\w+),\s*[^,]+,\s*[^,]+,\s*(\w+)\)", block)


def tuner_config_params(src):
    """The names of the rows of for_each_tuner_param (src/daemon/tuner_params.hpp) marked config."""
    names = re.findall(r'f\("(\w+)", &TunerParams::\w+, config,', read(src, "src/daemon/tuner_params.hpp"))
    if not names:
        raise SystemExit("check_docs.py: no config rows found in src/daemon/tuner_params.hpp")
    return names


def config_keys(src):
    keys = set(re.findall(r'v\("(/[a-z_/]+)"', read(src, "src/daemon/config.cpp")))
    if not keys:
        raise SystemExit("check_docs.py: no schema rows found in src/daemon/config.cpp")
    # visit_schema adds /tuner/<name> for each `config` row of the tuner's table.
    keys |= {"/tuner/" + name for name in tuner_config_params(src)}
    # visit_schema adds /pool/<name> for each kernel parameter of the library's table.
    keys |= {"/pool/" + name for name, _ in haltpoll_params(src)}
    # Every prefix of a key is a section ("socket", "tuner").
    for k in list(keys):
        parts = k.strip("/").split("/")
        for i in range(1, len(parts)):
            keys.add("/" + "/".join(parts[:i]))
    return keys


def varlink_names(src):
    text = read(src, "src/daemon/control/control_service.cpp") + read(src, "src/varlink/varlink.cpp")
    # Method and error declarations; a signature string may start with "\nmethod".
    names = set(re.findall(r"(?:method|error)\s+([A-Z]\w*)\s*\(", text))
    names |= set(re.findall(r'name\("([A-Z]\w*)"\)', text))
    if not names:
        raise SystemExit("check_docs.py: no IDL methods found")
    return names


def metric_names(src):
    text = read(src, "src/daemon/control/prometheus.cpp") + read(src, "src/daemon/fleet_metrics.cpp")
    names = set(re.findall(r'"(haltpoll_[a-z0-9_]+)"', text))
    # The worker families, generated from the library's counter table by the rules of
    # render_prometheus: *_ns in seconds, counters end in _total, tasks_run keeps its old name.
    pool = read(src, "include/haltpoll/worker_pool.hpp")
    block = pool[pool.index("#define HALTPOLL_WORKER_COUNTERS(X)"):]
    block = block[:block.index("\n\n")]
    for field, kind in re.findall(r"X\((\w+),\s*(counter|gauge),", block):
        ns = field.endswith("_ns")
        base = field[:-3] if ns else field
        if base == "tasks_run":
            base = "tasks"
        name = "haltpoll_worker_" + base + ("_seconds" if ns else "")
        names.add(name + ("_total" if kind == "counter" else ""))
    # The kernel parameter gauges: haltpoll_kernel_<param>, *_ns in seconds.
    for name, kind in haltpoll_params(src):
        names.add("haltpoll_kernel_" + (name[:-3] + "_seconds" if kind == "ns" else name))
    # A histogram's series.
    for n in list(names):
        for suffix in ("_bucket", "_sum", "_count"):
            names.add(n + suffix)
    return names


DOTTED_KEY = re.compile(r"(?<![\w./-])(socket|pool|probe|tuner|metrics|log)\.([a-z][a-z0-9_]*)\b(?![.(/\w-])")
PATH_KEY = re.compile(r"`(/(?:mode|cpus|sysfs_root|state_dir|socket|pool|probe|tuner|metrics|log)(?:/[a-z0-9_]+)*)`")
QUALIFIED_METHOD = re.compile(r"\b(?:io\.haltpolld|org\.varlink\.service)\.([A-Z][A-Za-z]*)\b")
BARE_METHOD = re.compile(r"`((?:Get|Set|Reset|Reload|Watch|Take)[A-Za-z]*)`")
# A metric family: haltpoll_ followed by one of the namespaces the exporter uses. CMake targets
# (haltpoll_idle_trace) and kernel functions (haltpoll_reflect) are not in these namespaces.
METRIC = re.compile(r"(?<![:\w])(haltpoll_(?:worker|kernel|tuner|control|config|wake|state|steal|uptime|info|other)[a-z0-9_]*)\b")
# Recording rules (level:metric:operations) are checked against contrib/prometheus.
RECORD = re.compile(r"\b([a-z_]+:haltpoll_[a-z0-9_]+:[a-z0-9_]+)\b")
# Names a document may use although the code does not have them, each with its reason.
ALLOWED = {
    # docs/hacking.md's worked example of adding a counter named `steals`.
    ("docs/hacking.md", "haltpoll_worker_steals_total"),
}
FILE_EXTS = {"cpp", "hpp", "h", "c", "json", "md", "sh", "py", "png", "service", "in", "cmake", "txt", "yml"}


def doc_files(src):
    files = [os.path.join(src, "README.md")]
    files += sorted(os.path.join(src, "docs", f) for f in os.listdir(os.path.join(src, "docs")) if f.endswith(".md"))
    files += sorted(os.path.join(src, "man", f) for f in os.listdir(os.path.join(src, "man")))
    return files


MD_LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")
QUOTED_DOCS_PATH = re.compile(r"`(docs/[^`\s*<>]+)`")


def check_paths(src):
    findings = []
    files = [os.path.join(src, "README.md"), os.path.join(src, "NEWS.md")]
    for dirpath, _, filenames in os.walk(os.path.join(src, "docs")):
        files += [os.path.join(dirpath, f) for f in filenames if f.endswith(".md")]
    for path in sorted(files):
        rel = os.path.relpath(path, src)
        for n, line in enumerate(read_lines(path), 1):
            for m in MD_LINK.finditer(line):
                target = m.group(1)
                if "://" in target or target.startswith("mailto:"):
                    continue
                if not os.path.exists(os.path.normpath(os.path.join(os.path.dirname(path), target))):
                    findings.append(f"{rel}:{n}: link to {target}, which does not exist")
            for m in QUOTED_DOCS_PATH.finditer(line):
                if not os.path.exists(os.path.join(src, m.group(1))):
                    findings.append(f"{rel}:{n}: {m.group(1)} does not exist")
    return findings


def check_names(src):
    keys, methods, metrics = config_keys(src), varlink_names(src), metric_names(src)
    records = set(re.findall(r"record:\s*(\S+)", read(src, "contrib/prometheus/haltpolld.rules.yml")))
    findings = check_paths(src)
    for path in doc_files(src):
        rel = os.path.relpath(path, src)
        for n, raw in enumerate(read_lines(path), 1):
            line = raw.replace("\\fB", "").replace("\\fR", "").replace("\\fI", "").replace("\\-", "-")
            for m in DOTTED_KEY.finditer(line):
                if m.group(2) in FILE_EXTS:
                    continue
                if f"/{m.group(1)}/{m.group(2)}" not in keys:
                    findings.append(f"{rel}:{n}: configuration key {m.group(0)} is not in the schema (src/daemon/config.cpp)")
            for m in PATH_KEY.finditer(line):
                if m.group(1) not in keys:
                    findings.append(f"{rel}:{n}: configuration key {m.group(1)} is not in the schema (src/daemon/config.cpp)")
            for rx in (QUALIFIED_METHOD, BARE_METHOD):
                for m in rx.finditer(line):
                    if m.group(1) not in methods:
                        findings.append(f"{rel}:{n}: varlink method or error {m.group(1)} is not in the IDL")
            for m in RECORD.finditer(line):
                if m.group(1) not in records:
                    findings.append(f"{rel}:{n}: recording rule {m.group(1)} is not in contrib/prometheus/haltpolld.rules.yml")
            for m in METRIC.finditer(line):
                if m.group(1) not in metrics and (rel, m.group(1)) not in ALLOWED:
                    findings.append(f"{rel}:{n}: metric {m.group(1)} is not written by src/daemon/control/prometheus.cpp")
    # Every key of the tuner's table is described where the tuner is (test_config checks the sample
    # configuration and haltpolld.json(5)).
    tuning = read(src, "docs/tuning.md")
    for name in tuner_config_params(src):
        if f"`tuner.{name}`" not in tuning and f"`{name}`" not in tuning:
            findings.append(f"docs/tuning.md: tuner.{name} (src/daemon/tuner_params.hpp) is not described")
    # The check itself must see what it checks: a rename in the code that empties a set would
    # otherwise pass every document.
    for name, found in (("keys", keys), ("methods", methods), ("metrics", metrics), ("recording rules", records)):
        if len(found) < 5:
            findings.append(f"check_docs.py: only {len(found)} {name} found in the code; the parser is out of date")
    return findings


def main(argv):
    if len(argv) != 3 or argv[1] not in ("wording", "names"):
        print(__doc__, file=sys.stderr)
        return 2
    src = argv[2]
    findings = check_wording(src) if argv[1] == "wording" else check_names(src)
    for f in findings:
        print(f)
    if findings:
        print(f"{len(findings)} finding(s)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
