#!/usr/bin/env python3
"""Checks the layering of libps/, launcher/ and daemons/ from their #include lines.

Usage: check_layering.py --root DIR [--stamp FILE]
           [--role MODULE=HEADER,HEADER ...] [--daemon FOLDER=MODULE ...]
           [--only-includer HEADER=FILE ...] MODULE=DEP,DEP ...

MODULE=DEP,DEP: libps's modules in list order (libps/meson.build's table), each with the
modules it depends on directly. --role: a module that is a role, with its interface (the
headers of it the launcher may include). --daemon: which module daemons/FOLDER runs.
--only-includer: the one file that may include HEADER (a path, or a prefix ending in /).

The rules, one message per violation:
  1. Dependencies point only upward: a module lists only modules before it in the list,
     and a file in libps/<m>/ includes only libps/<m>/ and the modules m depends on,
     directly or transitively. libps/ includes nothing from launcher/ or daemons/.
  2. Roles never include each other, nor list each other as dependencies.
  3. daemons/X includes only the module it runs (all of it) and modules that are no role.
  4. launcher/ includes of a role only its interface headers; anything of the other
     modules; nothing from daemons/.
  5. Each --only-includer header is included by its one file and no other.
The build runs this (libps/meson.build); exit 1 lists every violation.
"""
import argparse
import pathlib
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+["<]([^">]+)[">]')
SOURCES = ('.h', '.cc', '.fbs')


def closure(graph):
    out = {}
    for module in graph:
        seen, todo = set(), list(graph[module])
        while todo:
            d = todo.pop()
            if d in seen:
                continue
            seen.add(d)
            todo.extend(graph.get(d, []))
        out[module] = seen
    return out


def pairs(specs, what):
    out = {}
    for spec in specs:
        key, sep, value = spec.partition('=')
        if not sep or not key:
            sys.exit(f"check_layering: bad {what} '{spec}' (want KEY=VALUE)")
        out[key] = value
    return out


def includes(path):
    for lineno, line in enumerate(path.read_text(errors='replace').splitlines(), 1):
        m = INCLUDE.match(line)
        if m:
            yield lineno, m.group(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--root', required=True)
    ap.add_argument('--stamp')
    ap.add_argument('--role', action='append', default=[])
    ap.add_argument('--daemon', action='append', default=[])
    ap.add_argument('--only-includer', action='append', default=[])
    ap.add_argument('modules', nargs='+')
    args = ap.parse_args()

    order, graph = [], {}
    for name, deps in pairs(args.modules, 'module').items():
        order.append(name)
        graph[name] = [d for d in deps.split(',') if d]
    roles = {r: set(h for h in headers.split(',') if h)
             for r, headers in pairs(args.role, '--role').items()}
    daemons = pairs(args.daemon, '--daemon')
    only = pairs(args.only_includer, '--only-includer')
    for what, names in (('--role', roles), ('--daemon', daemons.values())):
        for m in names:
            if m not in graph:
                sys.exit(f"check_layering: {what} names {m}, which is not a module")

    errors = []
    table = 'libps/meson.build'
    # Rules 1 and 2 on the module table itself.
    for i, module in enumerate(order):
        for d in graph[module]:
            if d not in graph:
                errors.append(f"{table}: {module} depends on {d}, which is not a module")
            elif order.index(d) >= i:
                errors.append(f"{table}: {module} depends on {d}, which comes after it in the "
                              f"module list (dependencies point only upward)")
            elif module in roles and d in roles:
                errors.append(f"{table}: role {module} depends on role {d} (roles never depend "
                              f"on each other: move what they share into a module below the roles)")
    allowed = closure(graph)
    root = pathlib.Path(args.root)

    def files(top):
        for path in sorted((root / top).rglob('*')):
            if path.suffix in SOURCES and path.is_file():
                yield path

    def target_module(target):
        parts = target.split('/')
        return parts[1] if len(parts) > 2 and parts[0] == 'libps' else None

    def check_only_includer(rel, lineno, target):
        for header, owner in only.items():
            hit = target.startswith(header) if header.endswith('/') else target == header
            if hit and rel != owner:
                errors.append(f"{rel}:{lineno}: includes {target}: only {owner} may include "
                              f"{header} (use what it offers instead)")

    # libps/: rules 1, 2, 5.
    for path in files('libps'):
        rel = path.relative_to(root).as_posix()
        module = path.relative_to(root / 'libps').parts[0]
        if module not in graph:
            errors.append(f"libps/{module}: a folder that is not a module in {table}")
            continue
        for lineno, target in includes(path):
            check_only_includer(rel, lineno, target)
            top = target.split('/')[0]
            if top in ('launcher', 'daemons'):
                errors.append(f"{rel}:{lineno}: libps may not include {target}")
                continue
            dep = target_module(target)
            if dep is None or dep == module:
                continue
            if dep not in graph:
                errors.append(f"{rel}:{lineno}: includes {target}: {dep} is not a module")
            elif module in roles and dep in roles:
                errors.append(f"{rel}:{lineno}: role {module} may not include {target} of role "
                              f"{dep} (roles never include each other: move what they share "
                              f"into a module below the roles)")
            elif dep not in allowed[module]:
                errors.append(f"{rel}:{lineno}: {module} may not include {target} ({module} "
                              f"depends on: {', '.join(sorted(allowed[module])) or 'nothing'})")

    # daemons/X: rules 3, 5.
    for path in files('daemons'):
        rel = path.relative_to(root).as_posix()
        folder = path.relative_to(root / 'daemons').parts[0]
        if folder not in daemons:
            errors.append(f"daemons/{folder}: a daemon that runs no module declared in {table}")
            continue
        runs = daemons[folder]
        for lineno, target in includes(path):
            check_only_includer(rel, lineno, target)
            top = target.split('/')[0]
            if top == 'launcher' or (top == 'daemons' and target.split('/')[1] != folder):
                errors.append(f"{rel}:{lineno}: daemons/{folder} may not include {target}")
                continue
            dep = target_module(target)
            if dep is None:
                continue
            if dep not in graph:
                errors.append(f"{rel}:{lineno}: includes {target}: {dep} is not a module")
            elif dep in roles and dep != runs:
                errors.append(f"{rel}:{lineno}: daemons/{folder} runs {runs} and may not include "
                              f"{target} of role {dep} (a daemon includes only its own role and "
                              f"modules below the roles)")

    # launcher/: rules 4, 5.
    for path in files('launcher'):
        rel = path.relative_to(root).as_posix()
        for lineno, target in includes(path):
            check_only_includer(rel, lineno, target)
            if target.split('/')[0] == 'daemons':
                errors.append(f"{rel}:{lineno}: the launcher may not include {target}")
                continue
            dep = target_module(target)
            if dep is None:
                continue
            if dep not in graph:
                errors.append(f"{rel}:{lineno}: includes {target}: {dep} is not a module")
            elif dep in roles and target.split('/', 2)[2] not in roles[dep]:
                interface = ', '.join(sorted(roles[dep])) or 'none'
                errors.append(f"{rel}:{lineno}: the launcher may not include {target}, an "
                              f"internal header of role {dep} (its interface: {interface})")

    if errors:
        print('\n'.join(errors), file=sys.stderr)
        print(f"check_layering: {len(errors)} violation(s)", file=sys.stderr)
        return 1
    if args.stamp:
        pathlib.Path(args.stamp).write_text('ok\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
