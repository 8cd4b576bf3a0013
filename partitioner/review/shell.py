"""A launch script or command line as the argument list its launcher receives, read, never run.

Megatron-LM's and DeepSpeed's example scripts set variables and arrays and end in one launch
line (``torchrun ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py ${MODEL_ARGS[@]} ...``). A review must
not run a script it was handed, so this reads the subset of bash those scripts use: ``NAME=value``
(with ``${NAME:-default}``, ``$((a*b))`` and positional ``$1`` read as their defaults), arrays
``NAME=( ... )`` and ``NAME+=( ... )``, ``export``, ``if [[ "$X" == "v" ]] ... else ... fi``
with ``||``/``&&`` (a test it cannot decide, such as ``-f``, is false), comments and ``\\``
continuations. Anything else (functions, loops, command substitution other than arithmetic) is
left as it is and named in the notes. Torch-free; O(length of the script)."""

from __future__ import annotations

import ast
import re
import shlex
from dataclasses import dataclass, field

__all__ = ["expand_script", "Launch", "LAUNCHERS", "split_launcher"]

# The programs a launch line starts with; the script (or module) they run follows their own options.
LAUNCHERS = ("torchrun", "python", "python3", "deepspeed", "srun", "accelerate", "vllm", "uv")
_ASSIGN = re.compile(r"^(?:export\s+|local\s+|declare\s+(?:-\w+\s+)?)?([A-Za-z_][A-Za-z0-9_]*)(\+?)=(.*)$", re.S)
_VAR = re.compile(
    r"\$\{([A-Za-z_][A-Za-z0-9_]*|[0-9]+)(\[@\]|\[\*\])?(?::?-([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*|[0-9])"
)
_ARITH = re.compile(r"\$\(\(([^()]*)\)\)")
_TEST = re.compile(r'\[\[?\s*(!?)\s*"?([^"\]=!]*?)"?\s*(==|!=|=)\s*"?([^"\]]*?)"?\s*\]\]?')


@dataclass
class Launch:
    """The launch line's words, the variables read on the way and what could not be read."""

    words: list[str]
    variables: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _logical_lines(text: str) -> list[str]:
    """Lines with ``\\`` continuations joined and comments (outside quotes) removed."""
    joined = re.sub(r"\\\n", " ", text)
    out = []
    for line in joined.splitlines():
        try:
            lexer = shlex.shlex(line, posix=True, punctuation_chars=False)
            lexer.whitespace_split = True
            lexer.commenters = "#"
            list(lexer)  # checks the quotes close
            out.append(_strip_comment(line).strip())
        except ValueError:
            out.append(line.strip())
    return [line for line in out if line]


def _strip_comment(line: str) -> str:
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


_OPS = {ast.Add: int.__add__, ast.Sub: int.__sub__, ast.Mult: int.__mul__, ast.Div: int.__floordiv__}
_OPS[ast.FloorDiv] = int.__floordiv__
_OPS[ast.Mod] = int.__mod__


def _integer(node: ast.AST) -> int:
    """bash's ``$((...))`` over whole numbers: + - * / % and parentheses (no powers: a script's
    ``2**99**99`` is refused, not computed)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and abs(node.value) < 1 << 62:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_integer(node.operand)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        value = _OPS[type(node.op)](_integer(node.left), _integer(node.right))
        if abs(value) >= 1 << 62:
            raise ValueError("beyond 64 bits")
        return value
    raise ValueError(f"not arithmetic: {type(node).__name__}")


class _Shell:
    def __init__(self) -> None:
        self.scalars: dict[str, str] = {}
        self.arrays: dict[str, list[str]] = {}
        self.notes: list[str] = []

    def expand(self, text: str) -> str:
        """``text`` with its variables and arithmetic replaced (arrays joined by spaces)."""

        def var(m: re.Match[str]) -> str:
            name = m.group(1) or m.group(4)
            if name in self.arrays:  # unquoted ${A[@]}: its items split into words again, as bash does
                return " ".join(self.arrays[name])
            if name in self.scalars and self.scalars[name] != "":
                return self.scalars[name]
            return self.expand(m.group(3)) if m.group(3) is not None else ""

        text = _VAR.sub(var, text)
        return _ARITH.sub(lambda m: self._arith(m.group(1)), text)

    def _arith(self, expr: str) -> str:
        expr = re.sub(r"\b([A-Za-z_][A-Za-z0-9_]*)\b", lambda m: self.scalars.get(m.group(1), "0"), expr)
        try:
            return str(_integer(ast.parse(expr.strip() or "0", mode="eval").body))
        except (SyntaxError, ValueError, ZeroDivisionError):
            self.notes.append(f"$(({expr})) is not whole-number arithmetic: read as 0")
            return "0"

    def words(self, text: str) -> list[str]:
        try:
            return shlex.split(self.expand(text))
        except ValueError:
            return self.expand(text).split()

    def test(self, cond: str) -> bool:
        """An ``if`` condition: string comparisons and ``-z``/``-n``; anything else is false."""
        for alternative in re.split(r"\s\|\|\s", cond):
            if all(self._one(part) for part in re.split(r"\s&&\s", alternative)):
                return True
        return False

    def _one(self, part: str) -> bool:
        part = self.expand(part)
        m = _TEST.search(part)
        if m:
            equal = m.group(2).strip() == m.group(4).strip()
            return (equal if m.group(3) != "!=" else not equal) != bool(m.group(1))
        m = re.search(r'-([zn])\s+"?([^"\]]*)"?', part)
        if m:
            return (m.group(2).strip() == "") == (m.group(1) == "z")
        return False


def expand_script(text: str) -> Launch:
    """The last launch line of ``text`` (a script or one command line) as its words, after the
    script's variables and arrays. A text with no launcher is read as one command's words."""
    sh = _Shell()
    taking = [True]  # the branches of the ifs we are in: whether each is taken
    decided = [True]
    launch: list[str] | None = None
    lines = _logical_lines(text)
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        head = line.split(None, 1)[0] if line.split() else ""
        if head == "if":
            cond = re.sub(r";?\s*then\s*$", "", line[2:]).strip()
            outer = all(taking)
            hit = outer and sh.test(cond)
            taking.append(hit)
            decided.append(hit)
            continue
        if head in ("elif", "else"):
            if len(taking) > 1:
                was = decided[-1]
                cond = re.sub(r";?\s*then\s*$", "", line[4:]).strip() if head == "elif" else ""
                hit = all(taking[:-1]) and not was and (head == "else" or sh.test(cond))
                taking[-1] = hit
                decided[-1] = was or hit
            continue
        if head == "fi":
            if len(taking) > 1:
                taking.pop()
                decided.pop()
            continue
        if not all(taking) or head in ("then", "do", "done", "set", "mkdir", "echo", "cd", "exit", "source", "."):
            continue
        m = _ASSIGN.match(line)
        if m and not line.startswith(LAUNCHERS):
            name, append, value = m.group(1), m.group(2), m.group(3).strip()
            if value.startswith("("):
                while not value.rstrip().endswith(")") and i < len(lines):
                    value += "\n" + lines[i]
                    i += 1
                inner = value.strip()[1:-1]
                items = [w for row in inner.splitlines() for w in sh.words(_strip_comment(row))]
                sh.arrays[name] = (sh.arrays.get(name, []) if append else []) + items
            else:
                words = sh.words(value)
                sh.scalars[name] = (sh.scalars.get(name, "") if append else "") + (" ".join(words))
            continue
        words = sh.words(line)
        if words and (words[0] in LAUNCHERS or words[0].endswith(("/python", "/python3", "/torchrun"))):
            launch = words
        elif words and words[0].startswith("--") and launch is None:
            launch = words  # a bare argument list
    if launch is None:
        launch = sh.words(" ".join(lines))
        if not any(w.startswith("-") for w in launch):
            sh.notes.append("no launch line (torchrun, python, deepspeed, vllm ...) was found")
    return Launch(launch, {**sh.scalars, **{k: " ".join(v) for k, v in sh.arrays.items()}}, sh.notes)


def split_launcher(words: list[str]) -> tuple[dict[str, str], str, list[str]]:
    """(the launcher's own options, the program it runs, the program's arguments) of a launch
    line: ``torchrun --nproc_per_node 8 --nnodes 2 pretrain_gpt.py --tp 8`` gives
    ``({"nproc_per_node": "8", "nnodes": "2"}, "pretrain_gpt.py", ["--tp", "8"])``."""
    options: dict[str, str] = {}
    i = 1 if words and (words[0] in LAUNCHERS or words[0].endswith(("python", "python3", "torchrun"))) else 0
    if words[:1] == ["uv"] and words[1:2] == ["run"]:
        i = 2
    while i < len(words):
        w = words[i]
        if w == "-m" and i + 1 < len(words):
            return options, words[i + 1], words[i + 2 :]
        if w.startswith("--") and not w.endswith((".py",)):
            key, eq, value = w[2:].partition("=")
            if eq:
                options[key.replace("-", "_")] = value
                i += 1
            elif i + 1 < len(words) and not words[i + 1].startswith("-") and not words[i + 1].endswith(".py"):
                options[key.replace("-", "_")] = words[i + 1]
                i += 2
            else:
                options[key.replace("-", "_")] = ""
                i += 1
            continue
        if w.startswith("-"):
            i += 1
            continue
        return options, w, words[i + 1 :]
    return options, "", []
