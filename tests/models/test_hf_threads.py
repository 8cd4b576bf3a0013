"""A fresh process meeting Hugging Face models from many threads at once (the app's sessions on a
restarted server) gets the same answers as one thread (NOTE: [Optional imports and threads]):
transformers' lazy module once showed threads a half-made module ("module 'transformers' has no
attribute 'AutoConfig'")."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""
    import json, sys, threading
    sys.setswitchinterval(1e-5)
    from partitioner import optional
    from sample_models import _hf
    names = ["llama", "gpt2", "t5", "mistral", "bert", "vit", "mixtral", "llama-3-70b"]
    start = threading.Barrier(len(names) + 3)
    out = {}

    def fields(name):
        start.wait()
        try:
            out[name] = list(_hf.layer_fields(name))
        except Exception as exc:
            out[name] = repr(exc)

    def build():
        start.wait()
        try:
            module, inputs, _ = _hf.load_hf("gpt2", {"n_layer": 1, "n_embd": 16, "n_head": 2, "vocab_size": 64})
            out["build"] = [type(module).__name__, list(inputs[0].shape)]
        except Exception as exc:
            out["build"] = repr(exc)

    def other(name):
        start.wait()
        try:
            out[name] = optional.load(name).__name__
        except ImportError:
            out[name] = "not installed"
        except Exception as exc:
            out[name] = repr(exc)

    threads = [threading.Thread(target=fields, args=(n,)) for n in names]
    threads += [threading.Thread(target=build), threading.Thread(target=other, args=("accelerate",)),
                threading.Thread(target=other, args=("ortools.sat.python.cp_model",))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps(out))
""")


@pytest.mark.slow  # a fresh interpreter switching threads every 10 us: 15 s of the fast suite
def test_first_uses_of_transformers_from_many_threads_all_answer():
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    from sample_models import _hf

    for name in ("llama", "gpt2", "t5", "mistral", "bert", "vit", "mixtral", "llama-3-70b"):
        assert got[name] == list(_hf.layer_fields(name)) and got[name], name  # as one thread answers
    assert got["build"] == ["GPT2LMHeadModel", [1, 32]]
    assert got["accelerate"] in ("accelerate", "not installed")
    assert got["ortools.sat.python.cp_model"] in ("ortools.sat.python.cp_model", "not installed")
