"""``det-lite run SCRIPT [ARGS]``: a Determined script in local mode (no cluster info), as
``python3 SCRIPT ARGS`` would run it with Determined installed."""

from __future__ import annotations

import os
import textwrap

import pytest

from tests.cli_helpers import cli
from tests.compat.test_determined_trial import weights

SCRIPT = textwrap.dedent(
    """
    import sys
    import determined as det
    from determined import core, pytorch

    sys.path.insert(0, {fixtures!r})
    from train import Trial  # the Trainer-API fixture's trial class

    print("argv:", sys.argv, "info:", det.get_cluster_info())
    with core.init(checkpoint_storage={ckpts!r}) as c:
        (op,) = [op for op in c.searcher.operations() if op.report_completed(0.0) is None]
        print("op length:", op.length, "preempt:", c.preempt.should_preempt())
    with pytorch.init(hparams={{"global_batch_size": 2, "lr": 0.01}}, exp_conf={{"name": "local"}}) as ctx:
        result = pytorch.Trainer(Trial(ctx), ctx).fit(max_length=pytorch.Batch(4), checkpoint_policy="none")
    print("weight:", result.validation_metrics[-1]["metrics"]["weight"])
    sys.exit(int(sys.argv[1]))
    """
)


@pytest.mark.slow
def test_det_lite_run_is_determined_local_mode(tmp_path):
    fixtures = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures")
    script = tmp_path / "local.py"
    script.write_text(
        SCRIPT.format(fixtures=os.path.join(fixtures, "determined_scripts"), ckpts=str(tmp_path))
    )
    env = dict(os.environ, DET_LITE_TRIAL_SPEC=str(tmp_path / "stale-spec.json"), DET_LITE_PROGRESS="0")
    proc = cli("run", str(script), "3", "--flag", env=env)
    assert proc.returncode == 3, proc.stdout + proc.stderr  # the script's exit status
    assert f"argv: ['{script}', '3', '--flag'] info: None" in proc.stdout
    assert "op length: 1 preempt: False" in proc.stdout  # Determined's dummy searcher
    assert f"weight: {weights(4, gamma=1.0)[-1]!r}" in proc.stdout


@pytest.mark.slow
def test_det_lite_run_without_a_script_is_a_usage_error(tmp_path):
    proc = cli("run", str(tmp_path / "missing.py"))
    assert proc.returncode == 2
    assert f"det-lite: error: no script '{tmp_path / 'missing.py'}'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_det_lite_run_of_a_missing_module_is_one_line(tmp_path):
    for args in (("-m", "nosuchmod"), ("-m", "nosuch.sub"), (str(tmp_path / "trian.py"),)):
        proc = cli("run", *args, cwd=str(tmp_path))
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("det-lite: error: no "), proc.stderr


def test_det_lite_run_module_errors_stay_the_scripts(tmp_path):
    (tmp_path / "broken.py").write_text("import nosuchdependency\n")
    proc = cli("run", "-m", "broken", cwd=str(tmp_path))
    assert proc.returncode == 1 and "No module named 'nosuchdependency'" in proc.stderr


def test_det_lite_run_finalizes_the_scripts_objects_at_exit_as_python_does(tmp_path):
    """python3 collects a script's reference cycles at exit and runs their finalizers (a
    buffered file in a cycle is flushed then); det-lite run does too: it does not freeze the
    collector at exit as det-lite's other commands do (cli.main)."""
    script = tmp_path / "cycle.py"
    script.write_text(
        textwrap.dedent(
            """
            class Holder:
                def __init__(self, path):
                    self.me = self  # a reference cycle: only the collector frees it
                    self.out = open(path, "w")
                    self.out.write("written at exit")  # buffered, not flushed

                def __del__(self):
                    self.out.close()

            holder = Holder("out.txt")
            """
        )
    )
    proc = cli("run", str(script), cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "out.txt").read_text() == "written at exit"
