#!/usr/bin/env python3
"""Checks that every #include in libps/ points only along the declared module graph.

Usage: check_layering.py --root DIR [--stamp FILE] MODULE=DEP,DEP ...
A file in libps/<m>/ may include libps/<m>/... and libps/<d>/... for every d that m
depends on directly or transitively; nothing in libps/ may include launcher/ or
daemons/. The build runs this (libps/meson.build); exit 1 lists every violation.
"""
import argparse
import pathlib
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"((?:libps|launcher|daemons)/([a-z_]+)?[^"]*)"')


def closure(graph):
    out = {}
    for module in graph:
        seen, todo = set(), list(graph[module])
        while todo:
            d = todo.pop()
            if d in seen:
                continue
            if d not in graph:
                sys.exit(f"check_layering: {module} depends on unknown module {d}")
            seen.add(d)
            todo.extend(graph[d])
        out[module] = seen
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--root', required=True)
    ap.add_argument('--stamp')
    ap.add_argument('modules', nargs='+')
    args = ap.parse_args()
    graph = {}
    for spec in args.modules:
        name, _, deps = spec.partition('=')
        graph[name] = [d for d in deps.split(',') if d]
    allowed = closure(graph)
    root = pathlib.Path(args.root)
    errors = []
    for path in sorted((root / 'libps').rglob('*')):
        if path.suffix not in ('.h', '.cc', '.fbs') or not path.is_file():
            continue
        module = path.relative_to(root / 'libps').parts[0]
        if module not in graph:
            errors.append(f"libps/{module}: a folder that is not a module in libps/meson.build")
            continue
        for lineno, line in enumerate(path.read_text(errors='replace').splitlines(), 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            target, top = m.group(1), m.group(1).split('/')[0]
            if top != 'libps':
                errors.append(f"{path.relative_to(root)}:{lineno}: libps may not include {target}")
                continue
            dep = m.group(2)
            if dep != module and dep not in allowed[module]:
                errors.append(f"{path.relative_to(root)}:{lineno}: {module} may not include {target} "
                              f"({module} depends on: {', '.join(sorted(allowed[module])) or 'nothing'})")
    if errors:
        print('\n'.join(errors), file=sys.stderr)
        return 1
    if args.stamp:
        pathlib.Path(args.stamp).write_text('ok\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
