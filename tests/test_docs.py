"""The docs stay true: every relative link in README.md and docs/**/*.md resolves to a file of the
repository, every `kevlike …` command line in their fenced code blocks parses with the current command
line (the argparse parser of kevlike.cli, so nothing loads a model), and every config in configs/ opens
with the command that runs it. Fast: no torch, no model."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), ROOT / "configs" / "README.md",
                ROOT / "experiments" / "README.md", ROOT / "kevlike" / "models" / "default" / "MODEL_CARD.md"])
PAGES = [p for p in PAGES if p.exists()]

FENCE = re.compile(r"^(\s*)(```+|~~~+)(.*)$")
# [text](target) and ![alt](target); the target ends at whitespace or ')'; an optional "title" after it
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REF_DEF = re.compile(r"^\s*\[[^\]]+\]:\s*(\S+)", re.M)
SHELL_LANGS = {"", "bash", "sh", "shell", "console", "zsh"}


def _rel(p: Path) -> str:
    return str(p.relative_to(ROOT))


def _prose_and_blocks(text: str) -> tuple[str, list[tuple[str, str, int]]]:
    """The text outside fenced code blocks (inline code removed), and the blocks: (language, body, line)."""
    prose, blocks, body, lang, fence, start = [], [], [], None, None, 0
    for i, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line)
        if fence is None and m:
            fence, lang, body, start = m.group(2), m.group(3).strip().lower(), [], i + 1
        elif fence is not None and m and m.group(2).startswith(fence[0]) and len(m.group(2)) >= len(fence) \
                and not m.group(3).strip():
            blocks.append((lang, "\n".join(body), start))
            fence = None
        elif fence is not None:
            body.append(line)
        else:
            prose.append(re.sub(r"`[^`]*`", "", line))
    return "\n".join(prose), blocks


def _links(page: Path) -> list[str]:
    prose, _ = _prose_and_blocks(page.read_text(encoding="utf-8"))
    return LINK.findall(prose) + REF_DEF.findall(prose)


def test_pages_are_found():
    names = {_rel(p) for p in PAGES}
    assert {"README.md", "docs/README.md", "docs/results/README.md"} <= names, names
    assert any(n.startswith("docs/guide/") for n in names) and any(n.startswith("docs/design/") for n in names)


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_relative_links_resolve(page):
    broken = []
    for target in _links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith("#"):
            continue  # http(s):, mailto:, and anchors within the page
        path = target.split("#", 1)[0].split("?", 1)[0]
        resolved = (page.parent / path).resolve()
        if not resolved.exists():
            broken.append(target)
        elif ROOT not in resolved.parents and resolved != ROOT:
            broken.append(f"{target} (outside the repository)")
    assert not broken, f"{_rel(page)}: links that do not resolve: {broken}"


# --- command lines ---------------------------------------------------------------------------------------

def _command_lines(block: str) -> list[str]:
    """Logical lines of a shell block: continuation lines joined, a leading '$ ' prompt dropped."""
    lines, cur = [], ""
    for raw in block.splitlines():
        line = raw.rstrip()
        if line.endswith("\\"):
            cur += line[:-1] + " "
            continue
        lines.append((cur + line).strip())
        cur = ""
    if cur:
        lines.append(cur.strip())
    return [ln[2:] if ln.startswith("$ ") else ln for ln in lines if ln]


def _kevlike_invocations(line: str) -> list[list[str]]:
    """Every `kevlike ARGS` of one shell line: split at && || ; |, leading VAR=value and `time` skipped,
    comments dropped. Output that merely shows a prompt-less 'kevlike: error: …' line is not a command."""
    try:
        tokens = shlex.split(line, comments=True)
    except ValueError:  # an unbalanced quote: not a command line (e.g. prose in a text block)
        return []
    found, segment = [], []
    for tok in [*tokens, "&&"]:
        if tok in ("&&", "||", ";", "|"):
            while segment and (re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", segment[0]) or segment[0] in ("time", "nice")):
                segment.pop(0)
            if segment and segment[0] == "kevlike":
                found.append(segment[1:])
            segment = []
        else:
            segment.append(tok)
    return found


def _commands() -> list[tuple[str, list[str]]]:
    out = []
    for page in PAGES:
        _, blocks = _prose_and_blocks(page.read_text(encoding="utf-8"))
        for lang, body, start in blocks:
            if lang not in SHELL_LANGS:
                continue
            for line in _command_lines(body):
                for argv in _kevlike_invocations(line):
                    out.append((f"{_rel(page)}:{start}: kevlike {' '.join(argv)}", argv))
    return out


COMMANDS = _commands()


def test_commands_are_found():
    subs = {argv[0] for _, argv in COMMANDS if argv}
    assert len(COMMANDS) >= 40 and {"decide", "serve", "train", "eval", "calibrate", "bench"} <= subs, subs


def _parse(argv: list[str]) -> str | None:
    """None when argv parses; else argparse's message."""
    from kevlike import cli

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            cli.build_parser().parse_args(argv)
    except SystemExit as e:
        if e.code not in (0, None):  # --help and --version exit 0
            return err.getvalue().strip().splitlines()[-1] if err.getvalue().strip() else f"exit {e.code}"
    return None


def test_command_lines_parse():
    wrong = [f"{where}\n    {msg}" for where, argv in COMMANDS if (msg := _parse(argv))]
    assert not wrong, "command lines in the docs that the CLI rejects:\n" + "\n".join(wrong)


def test_the_parser_check_rejects_what_the_cli_rejects():
    assert _parse(["decide", "examples/review.json", "--max-request-tokens", "10"])  # serve's flag, not decide's
    assert _parse(["eval", "--suite", "heldout", "--option-mode", "M"])
    assert _parse(["decide", "examples/review.json", "--compact"]) is None
    assert _kevlike_invocations("OMP_NUM_THREADS=1 time kevlike bench --quick && kevlike models  # x") == \
        [["bench", "--quick"], ["models"]]


# --- configs ---------------------------------------------------------------------------------------------

CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.name)
def test_config_header_starts_with_its_command(config):
    """Line 1 is `# kevlike train configs/NAME.yaml [overrides]`, and that command parses."""
    first = config.read_text(encoding="utf-8").splitlines()[0]
    m = re.match(r"^#\s+(kevlike train .*)$", first)
    assert m, f"{config.name}: the first line must be the command that runs it, got {first!r}"
    argv = shlex.split(m.group(1), comments=True)[1:]
    assert argv[:2] == ["train", f"configs/{config.name}"], argv
    assert _parse(argv) is None, _parse(argv)
