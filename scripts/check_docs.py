#!/usr/bin/env python3
"""Checks of the documentation against the tree, run by the test command (suite 'tree').

  check_docs.py links    every relative link in every tracked *.md resolves: the file or
                         directory exists, and a #anchor names a heading of the target
  check_docs.py keys     every object key used in configs/*.json (nested ones included)
                         is described in docs/reference/*.md
  check_docs.py flags    every flag that an executable's --help prints (the daemons,
                         pstrain and each of its commands) is described in
                         docs/reference/*.md; needs PSTRAIN_BUILD_DIR
  check_docs.py history  no tracked file cites an issue number or a numbered
                         development round (references to other projects excepted)

Each prints what is wrong and exits 1, or prints one summary line and exits 0. The source
tree is this script's parent directory unless --source DIR (or PSTRAIN_SOURCE_DIR) says
otherwise.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import unicodedata


def tracked_files(src):
    """Paths (relative to src) of the files git tracks, or of every file when src is not a
    git checkout (then build directories and .git are skipped)."""
    try:
        out = subprocess.run(['git', '-C', src, 'ls-files', '-z'], check=True,
                             capture_output=True).stdout
        return [p for p in out.decode('utf-8').split('\0') if p]
    except (OSError, subprocess.CalledProcessError):
        paths = []
        for root, dirs, files in os.walk(src):
            dirs[:] = [d for d in dirs if d != '.git' and not d.startswith('build')]
            for f in files:
                paths.append(os.path.relpath(os.path.join(root, f), src))
        return sorted(paths)


def read_text(path):
    """The file's text, or None for a binary or non-UTF-8 file."""
    try:
        with open(path, 'rb') as f:
            data = f.read()
    except OSError:
        return None
    if b'\0' in data:
        return None
    try:
        return data.decode('utf-8')
    except UnicodeDecodeError:
        return None


def strip_code(markdown):
    """The text without fenced code blocks and inline code spans (links there are code)."""
    out = []
    fence = None
    for line in markdown.split('\n'):
        m = re.match(r'^\s*(```+|~~~+)', line)
        if m:
            if fence is None:
                fence = m.group(1)[0] * 3
            elif m.group(1).startswith(fence):
                fence = None
            out.append('')
            continue
        out.append('' if fence else re.sub(r'`+[^`]*`+', '', line))
    return '\n'.join(out)


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r'`', '', heading.strip())
    text = re.sub(r'\[([^\]]*)\]\([^)]*\)', r'\1', text)  # a link shows its text
    text = text.lower()
    kept = []
    for ch in text:
        cat = unicodedata.category(ch)
        if ch in '-_' or ch == ' ' or cat[0] in 'LN':
            kept.append(ch)
    return ''.join(kept).replace(' ', '-')


def anchors(markdown):
    """Every anchor the headings of a markdown text define (duplicates get -1, -2, ...)."""
    seen = {}
    result = set()
    fence = None
    for line in markdown.split('\n'):
        m = re.match(r'^\s*(```+|~~~+)', line)
        if m:
            fence = None if fence else m.group(1)[0]
            continue
        if fence:
            continue
        h = re.match(r'^#{1,6}\s+(.*?)\s*#*\s*$', line)
        if not h:
            continue
        base = slug(h.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        result.add(base if n == 0 else f'{base}-{n}')
    return result


LINK = re.compile(r'!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)')


def check_links(src):
    md_files = [p for p in tracked_files(src) if p.endswith('.md')]
    errors = []
    count = 0
    anchor_cache = {}

    def anchors_of(path):
        if path not in anchor_cache:
            anchor_cache[path] = anchors(read_text(path) or '')
        return anchor_cache[path]

    for rel in md_files:
        path = os.path.join(src, rel)
        text = read_text(path)
        if text is None:
            continue
        for lineno, line in enumerate(strip_code(text).split('\n'), 1):
            for m in LINK.finditer(line):
                target = m.group(1)
                if re.match(r'^[a-zA-Z][a-zA-Z0-9+.-]*:', target):  # http:, mailto:, ...
                    continue
                count += 1
                file_part, _, anchor = target.partition('#')
                dest = path if not file_part else os.path.normpath(
                    os.path.join(os.path.dirname(path), file_part))
                if not os.path.exists(dest):
                    errors.append(f'{rel}:{lineno}: {target}: no such file')
                    continue
                if anchor and dest.endswith('.md') and anchor not in anchors_of(dest):
                    errors.append(f'{rel}:{lineno}: {target}: no heading with anchor #{anchor} '
                                  f'in {os.path.relpath(dest, src)}')
    if errors:
        print('\n'.join(errors))
        print(f'links: {len(errors)} of {count} relative links do not resolve')
        return 1
    print(f'links: all {count} relative links in {len(md_files)} markdown files resolve')
    return 0


def reference_text(src):
    ref_dir = os.path.join(src, 'docs', 'reference')
    parts = []
    for name in sorted(os.listdir(ref_dir)):
        if name.endswith('.md'):
            parts.append(read_text(os.path.join(ref_dir, name)) or '')
    return '\n'.join(parts)


def documented_keys(reference):
    """The key names the reference describes. A key counts when it appears in backticks,
    alone (`steps`, `"steps"`) or as a component of a key path (`checkpoint.every_steps`,
    `fields[i].admit.min_count`, `dense.mode`), or as a quoted key in a JSON example of a
    code span or code block (`{"min_count": 3}`). A word in running prose does not."""
    keys = set()
    code = re.findall(r'```.*?```', reference, flags=re.S)
    spans = re.findall(r'`([^`\n]+)`', re.sub(r'```.*?```', '', reference, flags=re.S))
    for span in spans:
        s = span.strip().strip('"')
        if re.fullmatch(r'[A-Za-z_][\w-]*(\[[^\]]*\])?(\.[A-Za-z_][\w-]*(\[[^\]]*\])?)*', s):
            for comp in s.split('.'):
                keys.add(re.sub(r'\[[^\]]*\]$', '', comp))
    for block in spans + code:
        keys.update(re.findall(r'"([^"\s]+)"\s*:', block))
    return keys


def json_keys(value, path, out):
    if isinstance(value, dict):
        for k, v in value.items():
            out.append((k, f'{path}.{k}' if path else k))
            json_keys(v, f'{path}.{k}' if path else k, out)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            json_keys(v, f'{path}[{i}]', out)


def check_keys(src):
    known = documented_keys(reference_text(src))
    config_dir = os.path.join(src, 'configs')
    errors = []
    used = set()
    files = sorted(n for n in os.listdir(config_dir) if n.endswith('.json'))
    for name in files:
        with open(os.path.join(config_dir, name), encoding='utf-8') as f:
            try:
                doc = json.load(f)
            except json.JSONDecodeError as e:
                errors.append(f'configs/{name}: not JSON: {e}')
                continue
        found = []
        json_keys(doc, '', found)
        for key, path in found:
            used.add(key)
            if key not in known:
                errors.append(f'configs/{name}: {path}: key "{key}" is not in docs/reference/')
    if errors:
        print('\n'.join(errors))
        print(f'keys: {len(errors)} uses of undocumented keys in configs/*.json')
        return 1
    print(f'keys: all {len(used)} distinct keys of {len(files)} configs/*.json files are in '
          'docs/reference/')
    return 0


DAEMONS = ['daemons/ps/pstrain-ps', 'daemons/worker/pstrain-worker',
           'daemons/chief/pstrain-chief', 'daemons/evaluator/pstrain-evaluator',
           'daemons/serve/pstrain-serve']
LAUNCHER = 'launcher/pstrain'


def help_text(exe, args):
    r = subprocess.run([exe] + args + ['--help'], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise RuntimeError(f'{os.path.basename(exe)} {" ".join(args)} --help exited '
                           f'{r.returncode}: {r.stderr.strip()}')
    return r.stdout + r.stderr


def check_flags(src):
    build = os.environ.get('PSTRAIN_BUILD_DIR')
    if not build:
        print('flags: PSTRAIN_BUILD_DIR is not set (the build directory with the executables)')
        return 1
    reference = reference_text(src)
    helps = []  # (program name, help text)
    try:
        for d in DAEMONS:
            helps.append((os.path.basename(d), help_text(os.path.join(build, d), [])))
        launcher = os.path.join(build, LAUNCHER)
        top = help_text(launcher, [])
        helps.append(('pstrain', top))
        # The command list: the indented lines after "commands:" up to the first blank line.
        block = top.split('commands:', 1)[1].split('\n\n', 1)[0] if 'commands:' in top else ''
        commands = re.findall(r'^  ([a-z][a-z-]*)\s', block, flags=re.M)
        if not commands:
            print('flags: `pstrain --help` lists no commands')
            return 1
        for c in commands:
            helps.append((f'pstrain {c}', help_text(launcher, [c])))
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as e:
        print(f'flags: {e}')
        return 1
    errors = []
    flags = set()
    for program, text in helps:
        for flag in sorted(set(re.findall(r'(?<![\w-])--[a-z0-9][a-z0-9-]*', text))):
            flags.add(flag)
            if not re.search(re.escape(flag) + r'(?![\w-])', reference):
                errors.append(f'{program}: {flag} is not in docs/reference/')
    if errors:
        print('\n'.join(errors))
        print(f'flags: {len(errors)} flags printed by --help are not in docs/reference/')
        return 1
    print(f'flags: all {len(flags)} distinct flags of {len(helps)} --help texts are in '
          'docs/reference/')
    return 0


# Issue numbers and numbered development rounds: the word "issue" or "issues" followed by a
# number (with or without '#'), a bare '#' and number after a space, a parenthesis, a
# bracket, a comma or a semicolon, and "session", "round" or "development round" followed
# by a number.
HISTORY = re.compile(
    r'\bissues?\s*#?\d+'
    r'|\bsessions?\s+\d+'
    r'|\b(?:development\s+)?rounds?\s+\d+'
    r'|(?:^|(?<=[\s(\[,;]))#\d+\b', re.I)

# What the pattern would match but is not a citation of this project's history. Each entry
# is removed from a line before the pattern is applied.
ALLOWED = [
    # References to other projects' trackers: "TensorFlow #35148", "GCC bug 105329",
    # "tensorflow/serving#2017", "Boost issue 123".
    re.compile(r'\b(?:TensorFlow|GCC|Clang|LLVM|Boost|Asio|Beast|FlatBuffers|OpenBLAS|Catch2|'
               r'nlohmann|Meson|Kubeflow|Kubernetes|Slurm|Prometheus|OpenSSL|protobuf)'
               r'(?:\s+(?:bug|bugs|issue|issues|PR))?\s*#?\d+', re.I),
    re.compile(r'\b[\w.-]+/[\w.-]+#\d+'),
    # CSS colours in the HTML report's style sheet (libps/obs/report.cc).
    re.compile(r'(?:color|fill|stroke|background)\s*:\s*#[0-9a-fA-F]{3,6}\b'),
    # An ordinal in an error message: "variable #0 has an empty name".
    re.compile(r'\bvariable\s+#\d+\b'),
    # The benchmark and test scripts' repeated rounds of one measurement ("round 1 of 5",
    # "--rounds 3") are runs, not development rounds.
    re.compile(r'--rounds\s+\d+'),
    re.compile(r'\bround\s+\d+\s+of\s+\d+', re.I),
]

# Inputs that are data, not text: fuzz corpora and crash regressions.
SKIP_PREFIXES = ('test/fuzz/corpus/', 'test/fuzz/regressions/')


def check_history(src):
    errors = []
    files = [p for p in tracked_files(src) if not p.startswith(SKIP_PREFIXES)]
    checked = 0
    for rel in files:
        text = read_text(os.path.join(src, rel))
        if text is None:
            continue
        checked += 1
        for lineno, line in enumerate(text.split('\n'), 1):
            cleaned = line
            for a in ALLOWED:
                cleaned = a.sub('', cleaned)
            m = HISTORY.search(cleaned)
            if m:
                errors.append(f'{rel}:{lineno}: "{m.group(0)}": {line.strip()[:120]}')
    if errors:
        print('\n'.join(errors))
        print(f'history: {len(errors)} lines cite issue numbers or development rounds')
        return 1
    print(f'history: no issue numbers or development rounds in {checked} tracked text files')
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('check', choices=['links', 'keys', 'flags', 'history'])
    parser.add_argument('--source', default=os.environ.get(
        'PSTRAIN_SOURCE_DIR', os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    args = parser.parse_args()
    src = os.path.abspath(args.source)
    return {'links': check_links, 'keys': check_keys, 'flags': check_flags,
            'history': check_history}[args.check](src)


if __name__ == '__main__':
    sys.exit(main())
