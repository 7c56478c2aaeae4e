"""A remote store this machine cannot use is one line and exit 2, within `--timeout`; never a verdict.

Propeller reads through flytestdlib's storage layer with its own working credentials; a listing that fails
here (no or wrong credentials, no such bucket, an endpoint that refuses or never answers) says nothing about
what propeller would conclude (`aggregation/storage.py` `StoreUnreachable`). Run against moto's S3 server
on loopback, with IAM auth enforced, as a separate process; a closed port; and a port that accepts and never
answers.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest
from conftest import AGGSIM, T0

from aggregation.documents import error_document_bytes

pytestmark = pytest.mark.timeout(120)

BUCKET = "aggsim-bucket"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def base_env(endpoint: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        AWS_ENDPOINT_URL=endpoint,
        AWS_DEFAULT_REGION="us-east-1",
        AWS_EC2_METADATA_DISABLED="true",  # never wait for an instance-metadata endpoint
        AWS_SHARED_CREDENTIALS_FILE=os.devnull,
        AWS_CONFIG_FILE=os.devnull,
    )
    return env


@pytest.fixture(scope="module")
def s3():
    """moto's S3 + IAM server with auth enforced after set-up: (endpoint, valid credentials env)."""
    pytest.importorskip("moto.server")
    boto3 = pytest.importorskip("boto3")
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    # three unauthenticated actions create the user, its key and its policy; everything after is checked
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        env={**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "3"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                assert time.monotonic() < deadline and server.poll() is None, "moto server did not start"
                time.sleep(0.1)
        bootstrap = dict(aws_access_key_id="bootstrap", aws_secret_access_key="bootstrap", region_name="us-east-1")
        iam = boto3.client("iam", endpoint_url=endpoint, **bootstrap)
        iam.create_user(UserName="aggsim")
        key = iam.create_access_key(UserName="aggsim")["AccessKey"]
        policy = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
        iam.put_user_policy(UserName="aggsim", PolicyName="all", PolicyDocument=json.dumps(policy))
        valid = dict(AWS_ACCESS_KEY_ID=key["AccessKeyId"], AWS_SECRET_ACCESS_KEY=key["SecretAccessKey"])
        client = boto3.client(
            "s3",
            endpoint_url=endpoint,
            aws_access_key_id=valid["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=valid["AWS_SECRET_ACCESS_KEY"],
            region_name="us-east-1",
        )
        client.create_bucket(Bucket=BUCKET)
        data = error_document_bytes(code="USER:RuntimeError", worker="pod-a", timestamp_ns=T0)
        client.put_object(Bucket=BUCKET, Key="run/0/error-a.pb", Body=data)
        yield endpoint, valid
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def aggsim(env: dict, *args: str, timeout: float = 90) -> subprocess.CompletedProcess:
    return subprocess.run([AGGSIM, *args], env=env, capture_output=True, text=True, timeout=timeout)


def assert_one_line(done: subprocess.CompletedProcess, *needles: str) -> None:
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_with_working_credentials_the_verdict_is_propeller_s(s3):
    endpoint, valid = s3
    done = aggsim({**base_env(endpoint), **valid}, "explain", f"s3://{BUCKET}/run/0", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["error"]["code"] == "USER:RuntimeError"
    # an existing bucket with nothing under the prefix is a real verdict: propeller lists nothing too
    done = aggsim({**base_env(endpoint), **valid}, "explain", f"s3://{BUCKET}/run/9", "--json")
    assert done.returncode == 0 and json.loads(done.stdout)["task_phase"] == "SUCCEEDED"


def test_a_file_is_no_prefix_and_a_missing_file_no_empty_prefix(s3):
    """The same answers as for local paths: `explain` given an error file refuses it (it is an object, not the
    prefix an attempt's pods upload into), and `validate` given a file name that is not there fails (exit 2), never
    passing as an empty prefix."""
    endpoint, valid = s3
    env = {**base_env(endpoint), **valid}
    assert_one_line(aggsim(env, "explain", f"s3://{BUCKET}/run/0/error-a.pb"), "a file, not an output prefix")
    alone = aggsim(env, "validate", f"s3://{BUCKET}/run/0/error-a.pb")  # read as the file (its message is empty)
    assert alone.returncode == 1 and alone.stdout == f"s3://{BUCKET}/run/0/error-a.pb: message: `message` is empty\n"
    typo = aggsim(env, "validate", f"s3://{BUCKET}/run/0/error-a.pb", f"s3://{BUCKET}/run/0/error-TYPO.pb")
    assert (typo.returncode, typo.stdout) == (2, alone.stdout)  # the file that is there keeps its findings
    assert typo.stderr.count("\n") == 1 and "error-TYPO.pb: no such object" in typo.stderr
    assert_one_line(aggsim(env, "validate", f"s3://{BUCKET}/run/0/error-TYPO.pb", "--allow-empty"), "no such object")
    empty = aggsim(env, "validate", f"s3://{BUCKET}/run/9", "--allow-empty")  # a prefix with nothing: as documented
    assert empty.returncode == 0 and "no error files found" in empty.stdout


@pytest.mark.parametrize("command", ["explain", "validate"])
def test_no_credentials(s3, command):
    endpoint, _ = s3
    assert_one_line(aggsim(base_env(endpoint), command, f"s3://{BUCKET}/run/0"), f"s3://{BUCKET}/run/0", "credentials")


@pytest.mark.parametrize("command", ["explain", "validate"])
def test_wrong_credentials(s3, command):
    endpoint, _ = s3
    env = {**base_env(endpoint), "AWS_ACCESS_KEY_ID": "AKIAWRONGWRONGWRONG", "AWS_SECRET_ACCESS_KEY": "wrong"}
    assert_one_line(aggsim(env, command, f"s3://{BUCKET}/run/0"), "access denied")


@pytest.mark.parametrize("command", ["explain", "validate"])
def test_missing_bucket(s3, command):
    endpoint, valid = s3
    done = aggsim({**base_env(endpoint), **valid}, command, "s3://no-such-bucket-here/run/0")
    assert_one_line(done, "no such bucket 'no-such-bucket-here'")


def test_closed_port():
    port = free_port()  # nothing listens there
    done = aggsim(
        {**base_env(f"http://127.0.0.1:{port}"), "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "y"},
        "explain",
        f"s3://{BUCKET}/run/0",
        "--timeout",
        "5",
    )
    assert_one_line(done, "cannot connect")


@pytest.fixture
def silent_port():
    """A port that accepts connections and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    accepted = []
    stop = threading.Event()

    def accept():
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join(timeout=2)
        for connection in accepted:
            connection.close()
        listener.close()


@pytest.mark.parametrize("url", ["s3://{bucket}/run/0", "http://127.0.0.1:{port}/run/0"])
def test_an_endpoint_that_never_answers_is_given_up_on_within_the_timeout(silent_port, url):
    env = {**base_env(f"http://127.0.0.1:{silent_port}"), "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "y"}
    started = time.monotonic()
    done = aggsim(env, "explain", url.format(bucket=BUCKET, port=silent_port), "--timeout", "2")
    assert_one_line(done, "no answer from the store within 2 s")
    assert time.monotonic() - started < 30  # 2 s per request, not botocore's retries with backoff


def test_an_unreachable_http_prefix_is_not_an_empty_prefix():
    assert_one_line(aggsim(dict(os.environ), "explain", f"http://127.0.0.1:{free_port()}/prefix"), "cannot connect")


def test_an_empty_prefix_names_no_location():
    assert_one_line(aggsim(dict(os.environ), "explain", ""), "empty prefix")


def test_a_port_number_is_not_read_as_an_http_status():
    """Seen in CI: a refused connection to port 41403 was called "access denied" (its text holds "403")."""
    from botocore.exceptions import EndpointConnectionError

    from aggregation.storage import _why

    assert _why(EndpointConnectionError(endpoint_url="http://127.0.0.1:41403/bucket")).startswith("cannot connect")
    assert _why(PermissionError("Forbidden")).startswith("access denied")
