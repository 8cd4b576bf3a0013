"""Package-level rules: the library imports no UI code, and the public API is the documented one."""

import subprocess
import sys

import partitioner


def test_library_imports_no_ui_code():
    code = (
        "import sys, partitioner, partitioner.accelerator.api, partitioner.draw.dag, partitioner.accelerator.compare, "
        "partitioner.plan.diff, partitioner.interop.export; "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in {'streamlit', 'plotly', 'pandas', 'graphviz'}); "
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_public_api_names():
    for name in ("trace", "partition", "split", "Device", "Plan", "PartitionError", "parse_devices"):
        assert hasattr(partitioner, name)
    assert issubclass(partitioner.PartitionError, ValueError)
    assert set(partitioner.MODES) == {
        "size_based",
        "largest_first",
        "sparse_nn",
        "cost_aware",
        "kl_based",
        "aot_based",
        "optimal",
    }
