"""``checkpoint_storage: {type: s3}`` end to end against a real S3 server on loopback (moto's
server mode, started and stopped by a fixture; the client is never mocked), on the closed-form
linear trial of ``tests/fixtures/experiments/linear``."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from tests.cli_helpers import cli, describe, wait_for_batches
from tests.cli_helpers import write_config as _write_config
from tests.cloud_storage import (
    BUCKET,
    LINEAR,
    PREFIX,
    REPO,
    S3Server,
    assert_closed_form,
    free_port,
    linear_config,
    s3_server,
    wait_for_port,
    weight_after,
)
from tests.fixtures.experiments.linear.model_def import closed_form
from tests.timing import budget

boto3 = pytest.importorskip("boto3")
pytest.importorskip("moto.server")

SECRET = "s3cr3t-Value-9f2c"

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def s3():
    with s3_server() as server:
        yield server


def storage(s3: S3Server, **changes) -> dict:
    return {
        "type": "s3",
        "bucket": BUCKET,
        "prefix": PREFIX,
        "endpoint_url": s3.url,
        "access_key": "AKIDLITE",
        "secret_key": SECRET,
        **changes,
    }


def write_config(tmp_path, s3: S3Server, **changes) -> str:
    return linear_config(tmp_path, changes.pop("checkpoint_storage", None) or storage(s3), **changes)


def test_s3_trial_checkpoints_are_in_the_bucket_and_export_from_it(tmp_path, s3, _det_lite_home):
    """The issue's "done when": closed-form weights, every checkpoint the store lists is in the
    bucket under <prefix>/<uuid>/ (and nothing else is: retention deleted the others), and
    `det-lite checkpoint export` brings one back from the bucket with its state."""
    path = write_config(tmp_path, s3, min_checkpoint_period={"batches": 4})
    proc = cli("experiment", "create", path, LINEAR)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    exp = describe(1)
    (trial,) = exp["trials"]
    assert_closed_form(trial, 12)
    (ckpt,) = trial["checkpoints"]  # checkpoints at 4, 8, 12: retention keeps the last (also best)
    assert ckpt["total_batches"] == 12
    assert s3.uuids() == {ckpt["uuid"]}  # those at 4 and 8 were uploaded, then deleted
    keys = s3.keys()
    assert f"{PREFIX}/{ckpt['uuid']}/metadata.json" in keys
    assert any(k.startswith(f"{PREFIX}/{ckpt['uuid']}/code/") for k in keys)

    # The secret is in no output, not in describe, not in the store's file.
    assert SECRET not in proc.stdout + proc.stderr + json.dumps(exp)
    assert exp["config"]["checkpoint_storage"]["secret_key"] == "<redacted>"
    with open(os.path.join(str(_det_lite_home), "det-lite.db"), "rb") as f:
        assert SECRET.encode() not in f.read()

    # Export from the bucket: the local copy is gone.
    shutil.rmtree(os.path.join(str(_det_lite_home), "checkpoints", ckpt["uuid"]))
    dest = os.path.join(str(tmp_path), "exported")
    cli("checkpoint", "export", ckpt["uuid"], dest, check=True)
    from determined_lite.pytorch import load_trial_from_checkpoint_path

    restored = load_trial_from_checkpoint_path(dest, trust=True)
    assert restored.model.weight.item() == pytest.approx(weight_after(12), rel=1e-12)

    # The Python SDK's download too.
    shutil.rmtree(os.path.join(str(_det_lite_home), "checkpoints", ckpt["uuid"]))
    from determined_lite import client

    sdk_dest = client.get_checkpoint(ckpt["uuid"]).download(os.path.join(str(tmp_path), "sdk"))
    with open(os.path.join(sdk_dest, "metadata.json")) as f:
        assert json.load(f)["total_batches"] == 12

    # experiment delete removes the bucket's copies.
    cli("experiment", "delete", "1", "--yes", check=True)
    assert s3.keys() == []


def _start_foreground(path: str, env=None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "determined_lite.cli", "experiment", "create", path, LINEAR],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=REPO,
        env=env,
    )


# A run slow enough to be interrupted mid-way, with a checkpoint every 2 of its 24 batches.
SLOW_RUN = {
    "hyperparameters.sleep_s": 0.1,
    "searcher.max_length": {"batches": 24},
    "min_checkpoint_period": {"batches": 2},
}


def test_kill_then_activate_resumes_from_the_bucket(tmp_path, s3, _det_lite_home):
    path = write_config(tmp_path, s3, **SLOW_RUN)
    proc = _start_foreground(path)
    wait_for_batches(1, 6, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=budget(10))
    time.sleep(3)  # the workers notice their supervisor is gone and stop
    (trial,) = describe(1)["trials"]
    (latest,) = [
        c
        for c in trial["checkpoints"]
        if c["total_batches"] == max(x["total_batches"] for x in trial["checkpoints"])
    ]
    assert latest["uuid"] in s3.uuids()
    # Nothing local: activate resumes from what the bucket holds.
    shutil.rmtree(os.path.join(str(_det_lite_home), "checkpoints"))
    proc = cli("experiment", "activate", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"from checkpoint {latest['uuid'][:8]} (batch {latest['total_batches']})" in proc.stdout
    (trial,) = describe(1)["trials"]
    assert_closed_form(trial, 24)
    assert [v["total_batches"] for v in trial["validation_metrics"]] == [4, 8, 12, 16, 20, 24]
    ws = closed_form(0.01, 24, 2, 8)
    for t in trial["training_metrics"]:  # bit-exact resume: training metrics after it too
        b = t["total_batches"]
        assert t["metrics"]["weight"] == pytest.approx((ws[b - 2] + ws[b - 1]) / 2, rel=1e-12)
    # gc: only registered checkpoints stay in the bucket (a kill mid-upload leaves none behind).
    cli("checkpoint", "gc", check=True)
    assert s3.uuids() == {c["uuid"] for c in trial["checkpoints"]}


def test_unknown_bucket_and_unreachable_endpoint_are_one_line_at_create(tmp_path, s3, _det_lite_home):
    for changes, words in [
        ({"bucket": "no-such-bucket"}, "The specified bucket does not exist"),
        ({"endpoint_url": "http://127.0.0.1:9"}, "failed after"),
    ]:
        path = write_config(tmp_path, s3, checkpoint_storage=storage(s3, **changes))
        env = dict(os.environ, DET_LITE_STORAGE_RETRIES="1")
        proc = cli("experiment", "create", path, LINEAR, env=env)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert (
            lines[0].startswith(f"det-lite: error: {path}: checkpoint storage s3://") and words in lines[0]
        ), lines[0]
        assert SECRET not in proc.stderr
    assert cli("experiment", "list", "--json", check=True).stdout.strip() == "[]"


@pytest.fixture
def auth_s3():
    """moto's S3 server in a process of its own that checks credentials (IAM): its first four
    calls (a user, its policy, its key, the bucket) are let through; then only that key works."""
    port = free_port()
    env = dict(os.environ, INITIAL_NO_AUTH_ACTION_COUNT="4")
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, server, "moto_server")
        url = f"http://127.0.0.1:{port}"
        keys = {
            "endpoint_url": url,
            "region_name": "us-east-1",
            "aws_access_key_id": "x",
            "aws_secret_access_key": "y",
        }
        iam = boto3.client("iam", **keys)
        iam.create_user(UserName="trainer")
        policy = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
        iam.put_user_policy(UserName="trainer", PolicyName="all", PolicyDocument=json.dumps(policy))
        key = iam.create_access_key(UserName="trainer")["AccessKey"]
        boto3.client("s3", **keys).create_bucket(Bucket=BUCKET)
        yield url, key["AccessKeyId"], key["SecretAccessKey"]
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_wrong_credentials_are_one_line_at_create(tmp_path, auth_s3, _det_lite_home):
    """403 at create: exit 2, one line, nothing recorded, the secret nowhere."""
    url, _, _ = auth_s3
    fake = S3Server.__new__(S3Server)
    fake.url = url
    path = write_config(tmp_path, fake)
    proc = cli("experiment", "create", path, LINEAR)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "writing a test object failed:" in lines[0] and "after" not in lines[0], lines[0]
    assert SECRET not in proc.stderr
    assert cli("experiment", "list", "--json", check=True).stdout.strip() == "[]"


def test_credentials_from_the_environment(tmp_path, auth_s3, _det_lite_home):
    """No keys in the config: boto's own places (here AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY)."""
    url, key_id, secret = auth_s3
    fake = S3Server.__new__(S3Server)
    fake.url = url
    config = storage(fake)
    del config["access_key"], config["secret_key"]
    path = write_config(tmp_path, fake, checkpoint_storage=config)
    env = dict(os.environ, AWS_ACCESS_KEY_ID=key_id, AWS_SECRET_ACCESS_KEY=secret)
    proc = cli("experiment", "create", path, LINEAR, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (trial,) = describe(1)["trials"]
    assert_closed_form(trial, 12)
    import fsspec  # read as det-lite reads (moto's signature check refuses listings: not used)

    fs = fsspec.filesystem("s3", endpoint_url=url, key=key_id, secret=secret, skip_instance_cache=True)
    for c in trial["checkpoints"]:
        meta = json.loads(fs.cat_file(f"{BUCKET}/{PREFIX}/{c['uuid']}/metadata.json"))
        assert meta["total_batches"] == c["total_batches"] == 12
    env["AWS_SECRET_ACCESS_KEY"] = "wrong"
    assert cli("experiment", "create", path, LINEAR, env=env).returncode == 2


def test_server_stopped_mid_run_pauses_then_activate_finishes(tmp_path, s3, _det_lite_home):
    path = write_config(tmp_path, s3, **SLOW_RUN)
    env = dict(os.environ, DET_LITE_STORAGE_RETRIES="2")
    proc = _start_foreground(path, env=env)
    wait_for_batches(1, 4, proc)
    s3.stop()
    out, _ = proc.communicate(timeout=budget(120))
    assert proc.returncode == 1, out
    assert "failed after 3 tries" in out and "pausing the experiment" in out, out
    assert SECRET not in out
    exp = describe(1)
    assert exp["state"] == "PAUSED", out
    registered = {c["uuid"] for c in exp["trials"][0]["checkpoints"]}
    s3.start()  # fixed: the same server, its bucket as it was
    assert registered <= s3.uuids()
    proc = cli("experiment", "activate", "1", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (trial,) = describe(1)["trials"]
    assert_closed_form(trial, 24)


def test_core_api_asha_on_two_slots_uploads_from_the_chief(tmp_path, s3, _det_lite_home):
    """A Core API script on 2 workers (torch.distributed on Gloo) under ASHA: checkpoints
    stored with ``checkpoint.store_path`` are uploaded by the chief and registered; the promoted
    trial restores its rung's checkpoint (``restore_path``); the bucket holds exactly what the
    store lists, and the weights are the closed form."""
    from tests.compat.test_determined_trial import weights

    scripts = os.path.join(REPO, "tests", "fixtures", "determined_scripts")
    path = _write_config(
        os.path.join(scripts, "core.yaml"),
        tmp_path,
        "core.yaml",
        searcher={
            "name": "adaptive_asha",
            "metric": "val_loss",
            "max_length": {"batches": 8},
            "max_trials": 2,
            "max_rungs": 2,
            "divisor": 2,
            "mode": "aggressive",
        },
        hyperparameters={"lr": {"type": "double", "minval": 0.005, "maxval": 0.02}},
        checkpoint_storage=storage(s3),
        **{"reproducibility.experiment_seed": 1, "resources.slots_per_trial": 2},
    )
    # A promotion in a new process (not in the running one): it restores from the bucket.
    proc = cli("experiment", "create", path, scripts, env={**os.environ, "DET_LITE_NEXT_OP": "0"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    exp = describe(1)
    assert exp["state"] == "COMPLETED"
    assert sorted(t["total_batches"] for t in exp["trials"]) == [4, 8]
    registered = set()
    for trial in exp["trials"]:
        ws = weights(trial["total_batches"], lr=trial["hparams"]["lr"], gamma=1.0)
        for t in trial["training_metrics"]:
            assert t["metrics"]["weight"] == pytest.approx(ws[t["total_batches"] - 1], rel=1e-12)
        registered |= {c["uuid"] for c in trial["checkpoints"]}
    assert registered and s3.uuids() == registered
    promoted = next(t for t in exp["trials"] if t["total_batches"] == 8)
    assert "core: restored" in cli("trial", "logs", str(promoted["id"])).stdout


def test_warm_start_from_a_checkpoint_in_the_bucket(tmp_path, s3, _det_lite_home):
    """``searcher.source_checkpoint_uuid`` naming an s3 experiment's checkpoint whose local copy
    is gone: create fetches it from the bucket; the new trial starts from its weights."""
    cli(
        "experiment",
        "create",
        write_config(tmp_path, s3, **{"searcher.max_length": {"batches": 4}}),
        LINEAR,
        check=True,
    )
    ((ckpt,),) = [t["checkpoints"] for t in describe(1)["trials"]]
    shutil.rmtree(os.path.join(str(_det_lite_home), "checkpoints", ckpt["uuid"]))
    path = write_config(
        tmp_path,
        s3,
        **{"searcher.max_length": {"batches": 4}, "searcher.source_checkpoint_uuid": ckpt["uuid"]},
    )
    cli("experiment", "create", path, LINEAR, check=True)
    (trial,) = describe(2)["trials"]
    expected = closed_form(0.01, 4, 2, 8, w0=weight_after(4))[3]
    assert trial["validation_metrics"][-1]["metrics"]["weight"] == pytest.approx(expected, rel=1e-12)


def test_keys_planted_in_the_bucket_write_nothing_outside(tmp_path, s3, _det_lite_home):
    """Issue 40: objects whose keys leave the checkpoint (``..``) planted under a registered
    checkpoint's prefix. `checkpoint export`, the SDK's ``Checkpoint.download()`` and a warm
    start that fetches it each refuse with one line naming the key; nothing is written outside
    (nor anything half-made inside)."""
    short = {"searcher.max_length": {"batches": 4}}
    cli("experiment", "create", write_config(tmp_path, s3, **short), LINEAR, check=True)
    ((ckpt,),) = [t["checkpoints"] for t in describe(1)["trials"]]
    uuid, home = ckpt["uuid"], str(_det_lite_home)
    # Listed after code/'s files (S3 lists in byte order), so code/ exists when it is written.
    planted = f"{PREFIX}/{uuid}/code//../../../evil"
    s3.client().put_object(Bucket=BUCKET, Key=planted, Body=b"echo owned\n")
    shutil.rmtree(os.path.join(home, "checkpoints", uuid))
    line = (
        f"checkpoint storage s3://{BUCKET}/{PREFIX}: refused to read '{BUCKET}/{planted}' (a '..' "
        "segment in its name): a stored name must stay inside its destination; nothing was written"
    )

    def nothing_written() -> None:
        # Where the old code put it: <home>/checkpoints/.tmp-<uuid>-<hex>/code//../../../evil
        assert not os.path.exists(os.path.join(home, "evil"))
        assert os.listdir(os.path.join(home, "checkpoints")) == []
        assert sorted(os.listdir(str(tmp_path))) == sorted(["exp.yaml", os.path.basename(home)])

    proc = cli("checkpoint", "export", uuid, os.path.join(str(tmp_path), "exported"))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == [f"det-lite: error: checkpoint {uuid}: {line}"]
    nothing_written()

    from determined_lite import client
    from determined_lite.storage import UnsafeNameError

    with pytest.raises(UnsafeNameError) as e:
        client.get_checkpoint(uuid).download(os.path.join(str(tmp_path), "sdk"))
    assert str(e.value) == line
    nothing_written()

    path = write_config(tmp_path, s3, **short, **{"searcher.source_checkpoint_uuid": uuid})
    proc = cli("experiment", "create", path, LINEAR)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"det-lite: error: {path}: searcher.source_checkpoint_uuid: checkpoint {uuid}: {line}"
    ]
    assert not os.path.exists(os.path.join(home, "evil"))
    assert os.listdir(os.path.join(home, "checkpoints")) == []
    assert [e["id"] for e in json.loads(cli("experiment", "list", "--json", check=True).stdout)] == [1]
