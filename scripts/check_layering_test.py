#!/usr/bin/env python3
"""Tests of check_layering.py: a small tree that keeps every rule passes, and each rule,
broken once in a copy of it, fails with its own message. Exit 0 when all pass."""
import pathlib
import shutil
import subprocess
import sys
import tempfile

CHECK = pathlib.Path(__file__).with_name('check_layering.py')

# A tree with a module below the roles (low), a shared module (mid) and two roles.
CLEAN = {
    'libps/low/low.h': '#include <vector>\n',
    'libps/low/json.h': '#include <nlohmann/json.hpp>\n',
    'libps/mid/mid.h': '#include "libps/low/low.h"\n',
    'libps/alpha/alpha.h': '#include "libps/mid/mid.h"\n',
    'libps/alpha/inner.h': '#include "libps/alpha/alpha.h"\n',
    'libps/beta/beta.h': '#include "libps/mid/mid.h"\n',
    'daemons/a/main.cc': '#include "libps/alpha/inner.h"\n#include "libps/mid/mid.h"\n',
    'daemons/p/main.cc': '#include "libps/mid/mid.h"\n',
    'launcher/cli.cc': '#include "libps/alpha/alpha.h"\n#include "libps/low/json.h"\n',
}
MODULES = ['low=', 'mid=low', 'alpha=mid', 'beta=mid']
ARGS = ['--role', 'alpha=alpha.h', '--role', 'beta=beta.h', '--daemon', 'a=alpha',
        '--daemon', 'p=mid', '--only-includer', 'nlohmann/=libps/low/json.h']

# [what is broken, files changed (appended to), module list, a line the output must hold]
CASES = [
    ('a module lists one after it', {}, ['low=mid', 'mid=low', 'alpha=mid', 'beta=mid'],
     'low depends on mid, which comes after it in the module list'),
    ('a module includes one it does not depend on', {'libps/low/low.h': '#include "libps/mid/mid.h"\n'},
     MODULES, 'libps/low/low.h:2: low may not include libps/mid/mid.h'),
    ('libps includes the launcher', {'libps/mid/mid.h': '#include "launcher/cli.h"\n'}, MODULES,
     'libps/mid/mid.h:2: libps may not include launcher/cli.h'),
    ('a role lists another', {}, ['low=', 'mid=low', 'alpha=mid', 'beta=mid,alpha'],
     'role beta depends on role alpha'),
    ('a role includes another', {'libps/beta/beta.h': '#include "libps/alpha/alpha.h"\n'}, MODULES,
     'libps/beta/beta.h:2: role beta may not include libps/alpha/alpha.h of role alpha'),
    ('a daemon includes another role', {'daemons/a/main.cc': '#include "libps/beta/beta.h"\n'},
     MODULES, 'daemons/a/main.cc:3: daemons/a runs alpha and may not include libps/beta/beta.h'),
    ('a daemon of no declared module', {'daemons/q/main.cc': '\n'}, MODULES,
     'daemons/q: a daemon that runs no module declared'),
    ('the launcher includes a role\'s internals',
     {'launcher/cli.cc': '#include "libps/alpha/inner.h"\n'}, MODULES,
     'launcher/cli.cc:3: the launcher may not include libps/alpha/inner.h, an internal header'),
    ('a second file includes nlohmann', {'libps/mid/mid.h': '#include <nlohmann/json_fwd.hpp>\n'},
     MODULES, 'libps/mid/mid.h:2: includes nlohmann/json_fwd.hpp: only libps/low/json.h may'),
]


def write(root, files, extra):
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text + extra.get(rel, ''))
    for rel, text in extra.items():
        if rel not in files:
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)


def run(root, modules):
    return subprocess.run([sys.executable, str(CHECK), '--root', str(root)] + ARGS + modules,
                          capture_output=True, text=True)


def main():
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        clean = pathlib.Path(tmp) / 'clean'
        write(clean, CLEAN, {})
        r = run(clean, MODULES)
        if r.returncode != 0:
            print(f"FAIL: the clean tree does not pass:\n{r.stderr}")
            failures += 1
        for i, (what, extra, modules, want) in enumerate(CASES):
            root = pathlib.Path(tmp) / f'case{i}'
            write(root, CLEAN, extra)
            r = run(root, modules)
            if r.returncode != 1 or want not in r.stderr:
                print(f"FAIL: {what}: exit {r.returncode}, want 1 and '{want}' in:\n{r.stderr}")
                failures += 1
            else:
                print(f"ok: {what}")
            shutil.rmtree(root)
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
