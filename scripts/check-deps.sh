#!/usr/bin/env bash
# Checks the module layering of src/: prints the graph of top-level modules (which module's files
# name `crate::<other>`), then fails (exit 1) if a file outside src/app references `crate::app`,
# if the top-level modules form a cycle, if a module imports one above it in LAYERS, if a
# command module (src/app/cmd/*) imports another command, or if src/app/common.rs imports one.
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 - "$@" <<'PY'
import os, re, sys

# Bottom to top. A module may import only modules listed before it (its own files aside).
# Pure core first (no rdkafka, no tokio), then the metrics registry and io, then the app edge.
LAYERS = [
    "types", "clock", "hist", "text", "input", "fingerprint", "verify", "index", "window",
    "routing", "engine", "state", "metrics", "io", "app",
]
RANK = {m: i for i, m in enumerate(LAYERS)}

def top_module(path):
    rel = os.path.relpath(path, "src")
    first = rel.split(os.sep)[0]
    return first[:-3] if first.endswith(".rs") else first

def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return "\n".join(l.split("//")[0] if "\"" not in l else l for l in text.splitlines())

REF = re.compile(r"\bcrate::(\w+)")
USE_GROUP = re.compile(r"\buse\s+crate::\{([^;]*)\}", re.S)

edges = {}   # module -> {module: [files]}
violations = []
for root, _, files in os.walk("src"):
    for f in sorted(files):
        if not f.endswith(".rs"):
            continue
        path = os.path.join(root, f)
        mod = top_module(path)
        if mod in ("lib", "main"):
            continue
        text = strip_comments(open(path, encoding="utf-8").read())
        names = set(REF.findall(text))
        for group in USE_GROUP.findall(text):
            names.update(re.findall(r"(?:^|[,{\s])(\w+)\s*(?:::|,|}|$)", group))
        for other in names:
            if other in (mod, "self", "super"):
                continue
            edges.setdefault(mod, {}).setdefault(other, []).append(path)
            if other == "app":
                violations.append(f"{path}: references crate::app (only src/app may)")

# Inside app: each command (src/app/cmd/<name>) imports no other command, and the shared
# module (src/app/common.rs) imports no command and not the CLI.
CMD_REF = re.compile(r"\bcrate::app::cmd::(\w+)")
for root, _, files in os.walk("src/app"):
    for f in sorted(files):
        if not f.endswith(".rs"):
            continue
        path = os.path.join(root, f)
        text = strip_comments(open(path, encoding="utf-8").read())
        rel = os.path.relpath(path, "src/app").split(os.sep)
        if rel == ["common.rs"] and re.search(r"\bcrate::app::(cmd|cli)\b", text):
            violations.append(f"{path}: app::common imports a command or the CLI")
        if rel[0] == "cmd" and len(rel) > 1:
            own = rel[1][:-3] if rel[1].endswith(".rs") else rel[1]
            for other in set(CMD_REF.findall(text)) - {own}:
                violations.append(f"{path}: command {own} imports command {other}")

mods = sorted(set(edges) | {m for d in edges.values() for m in d}, key=lambda m: RANK.get(m, -1))
print("module graph (module -> modules it imports):")
for m in mods:
    deps = sorted(edges.get(m, {}), key=lambda d: RANK.get(d, -1))
    print(f"  {m:12} -> {', '.join(deps) if deps else '(nothing)'}")

for m, deps in edges.items():
    if m not in RANK:
        violations.append(f"module {m} is not in LAYERS (add it to scripts/check-deps.sh)")
        continue
    for d, files in deps.items():
        if d not in RANK:
            continue
        if RANK[d] > RANK[m]:
            violations.append(f"{m} imports {d}, a layer above it ({', '.join(sorted(set(files)))})")

# Cycles between top-level modules (independent of LAYERS).
state = {}
stack = []
def visit(m):
    state[m] = 1
    stack.append(m)
    for d in sorted(edges.get(m, {})):
        if state.get(d) == 1:
            cyc = stack[stack.index(d):] + [d]
            violations.append("cycle: " + " -> ".join(cyc))
        elif d not in state:
            visit(d)
    stack.pop()
    state[m] = 2
for m in sorted(edges):
    if m not in state:
        visit(m)

if violations:
    print("\nviolations:")
    for v in sorted(set(violations)):
        print("  " + v)
    sys.exit(1)
print("\nok: no file outside src/app references crate::app; no cycle between top-level modules;")
print("    no command imports another; app::common imports no command")
PY
