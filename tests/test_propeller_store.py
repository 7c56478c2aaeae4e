"""Propeller's store names what it lists, and the earliest reader HEADs those names (`aggregation/propeller_store.py`).

flytestdlib v1.16.8 `storage/stow_store.go` `StowStore.List` (names from flyteorg/stow's `item.URL()`),
`StowStore.Head` -> `getContainer`, `storage.go` `DataReference.Split`; `config.go` `defaultConfig`;
`newStowRawStore` / `legacyS3ConfigMap`; flyteplugins `ioutils/remote_file_output_reader.go`
`earliestFileErrorReader.IsError`.
"""

from __future__ import annotations

import subprocess

import pytest
from conftest import AGGSIM, SCENARIOS, T0
from hypothesis import given
from hypothesis import strategies as st

from aggregation.deployment import DeploymentConfigError, load_deployment
from aggregation.documents import error_document_bytes
from aggregation.explain import explain_prefix
from aggregation.propeller import PropellerConfig
from aggregation.propeller_store import (
    PropellerStore,
    StoreKind,
    StoreNamingUnknown,
    go_quote,
    go_url_host,
)
from aggregation.readers import DEFAULT, EARLIEST, RULE_FUTURES_HEAD_FAILED, RULE_ROUND_ERROR, reader_for
from aggregation.storage import MemoryPrefix

AWS = PropellerStore(StoreKind.AWS_S3, "my-bucket", "eu-west-1")
REFUSED = (
    "Conf container:my-bucket != Passed Container:s3-eu-west-1.amazonaws.com. Dynamic loading is disabled: not found"
)


def _store(tmp_path, text: str, *more: str):
    paths = []
    for index, body in enumerate((text, *more)):
        path = tmp_path / f"config-{index}.yaml"
        path.write_text(body)
        paths.append(str(path))
    return load_deployment(paths).store


def _two_errors(location: str = "s3://my-bucket/metadata/n0/0") -> MemoryPrefix:
    recoverable = error_document_bytes(code="USER:Recoverable", recoverable=True, timestamp_ns=T0)
    genuine = error_document_bytes(code="USER:RuntimeError", timestamp_ns=T0 + 10**9)
    files = [("error-a.pb", recoverable), ("error-b.pb", genuine), ("error.pb", genuine), ("errors.txt", b"x")]
    return MemoryPrefix(files, location=location)


# --- which store a deployment runs (newStowRawStore) ---------------------------------------------------------------


def _aws(container: str, region: str = "us-east-1") -> PropellerStore:
    return PropellerStore(StoreKind.AWS_S3, container, region)


AS_NAMED_B = PropellerStore(StoreKind.AS_NAMED, "b")


@pytest.mark.parametrize(
    "text, store",
    [
        # config.go defaultConfig: type s3, region us-east-1, no endpoint; legacyS3ConfigMap adds an endpoint only
        # when one is set: AWS S3
        ("storage: {container: my-bucket}", _aws("my-bucket")),
        ("storage: {type: minio, container: b, connection: {region: eu-west-1}}", _aws("b", "eu-west-1")),
        ("storage: {container: b, connection: {endpoint: 'http://minio:9000'}}", AS_NAMED_B),
        # the stow section wins only with both a kind and a config (`len(Kind) > 0 && len(Config) > 0`)
        (
            "storage: {type: stow, container: b, stow: {kind: s3, config: {region: ap-south-1}}}",
            _aws("b", "ap-south-1"),
        ),
        ("storage: {type: stow, container: b, stow: {kind: s3, config: {endpoint: 'http://x:9'}}}", AS_NAMED_B),
        ("storage: {type: stow, container: b, stow: {kind: google, config: {json: '{}'}}}", AS_NAMED_B),
        ("storage: {type: stow, container: b, stow: {kind: azure}}", _aws("b")),
        # stow s3 newS3Client: an endpoint key present but empty is no custom endpoint (item.URL's AWS form)
        ("storage: {container: b, stow: {kind: s3, config: {endpoint: ''}}}", _aws("b")),
    ],
)
def test_the_store_is_the_one_propeller_builds_from_its_storage_section(tmp_path, text, store):
    assert _store(tmp_path, text) == store


def test_no_storage_setting_leaves_the_store_as_the_prefix_names_it(tmp_path):
    """Nothing said about storage (a file of propeller's own sections, or only `storage.limits`): the model cannot
    know the store, and keeps the naming whose names HEAD reaches."""
    assert _store(tmp_path, "storage: {limits: {maxDownloadMBs: 5}}\npropeller: {max-workflow-retries: 3}") is None
    config = load_deployment([]).propeller_config()
    assert config.store == PropellerStore() == PropellerConfig().store


def test_storage_settings_merge_across_files_key_by_key(tmp_path):
    """viper merges the files' maps: a later file's stow.config key joins the earlier ones."""
    first = "storage: {type: stow, container: b, stow: {kind: s3, config: {region: eu-west-3}}}"
    second = "storage: {stow: {config: {endpoint: 'http://minio:9000'}}}"
    assert _store(tmp_path, first) == PropellerStore(StoreKind.AWS_S3, "b", "eu-west-3")
    assert _store(tmp_path, first, second) == PropellerStore(StoreKind.AS_NAMED, "b")


@pytest.mark.parametrize(
    "text, message",
    [
        ("storage: {type: s3}", "storage.container: not set: propeller does not start without it"),
        ("storage: {type: S3, container: b}", "storage.type: 'S3' is not a store type propeller knows"),
        ("storage: {container: b, stow: {kind: nosuch, config: {a: b}}}", "storage.stow.kind: 'nosuch' is not a stow"),
        ("storage: {container: b, stow: {config: [1]}}", "storage.stow.config: expected a section"),
        ("storage: {container: [b]}", "storage.container: expected a string"),
    ],
)
def test_a_store_propeller_would_not_start_with_is_one_line(tmp_path, text, message):
    with pytest.raises(DeploymentConfigError, match=message.replace(".", r"\.").replace("(", r"\(")) as raised:
        _store(tmp_path, text)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize(
    "text, refusal",
    [
        ("storage: {type: mem, container: my-bucket}", "storage.type: mem: the model does not know"),
        # flytestdlib v1.16.8 `rawstores.go`: mem is `NewInMemoryRawStore`, which needs no container (only stow does)
        ("storage: {type: mem}", "storage.type: mem: the model does not know"),
        (
            "storage: {container: my-bucket, stow: {kind: azure, config: {a: b}}}",
            "storage.stow.kind: azure: the model knows",
        ),
        ("storage: {container: my-bucket, enable-multicontainer: true}", "storage.enable-multicontainer: on AWS S3"),
    ],
)
def test_a_store_whose_naming_is_not_modelled_is_refused_only_by_the_earliest_reader(tmp_path, text, refusal):
    """Only `earliestFileErrorReader` uses listed names: the default reader reads such a deployment as any other, and
    the earliest one refuses once it lists an error file (no file: nothing named, no error)."""
    store = _store(tmp_path, text)
    assert store.kind is StoreKind.UNMODELLED
    assert reader_for(DEFAULT, store=store).read(_two_errors()).error.code == "USER:RuntimeError"
    assert reader_for(EARLIEST, store=store).read(MemoryPrefix([("errors.txt", b"")])).error is None
    with pytest.raises(StoreNamingUnknown, match=refusal.replace(".", r"\.")):
        reader_for(EARLIEST, store=store).read(_two_errors())
    config = tmp_path / "aggregation.yaml"
    config.write_text("plugins: {k8s: {enable-distributed-error-aggregation: true}}\n")
    scenario = str(SCENARIOS / "preemption_during_training.textproto")
    command = [AGGSIM, "simulate", scenario, "--propeller-config", str(tmp_path / "config-0.yaml")]
    refused = subprocess.run([*command, "--propeller-config", str(config)], capture_output=True, text=True)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1 and refusal in refused.stderr
    assert subprocess.run(command, capture_output=True, text=True).returncode == 0  # aggregation off: played


# --- the earliest reader on AWS S3 (IsError HEADs the listed name) ---------------------------------------------------


def test_on_aws_s3_the_earliest_reader_cannot_head_what_it_listed_and_the_round_fails():
    """`StowStore.List` names AWS S3 items `https://s3-<region>.amazonaws.com/<bucket>/<key>` (stow s3 `item.URL`,
    whose path starts with "http"); `DataReference.Split` makes the host the container, and `getContainer` refuses
    it with multi-container loading off: `IsError` fails on the first listed `.pb`, whichever file it is."""
    read = reader_for(EARLIEST, store=AWS).read(_two_errors())
    assert (read.error, read.rule) == (None, RULE_ROUND_ERROR)
    listed = "https://s3-eu-west-1.amazonaws.com/my-bucket/metadata/n0/0/error-a.pb"
    assert read.round_error == f"failed to read error file @[{listed}]: {REFUSED}"
    assert [c.path for c in read.candidates] == ["error-a.pb", "error-b.pb", "error.pb"]
    assert read.ignored == ("errors.txt",)


def test_on_aws_s3_the_default_reader_heads_the_name_it_builds_and_reads_error_pb():
    """`singleFileErrorReader` HEADs `<prefix>/error.pb` as it builds it (`GetErrorPath`), never a listed name."""
    read = reader_for(DEFAULT, store=AWS).read(_two_errors())
    assert read.round_error is None and read.error.code == "USER:RuntimeError"


def test_on_aws_s3_no_error_file_is_no_error_and_other_keys_are_never_headed():
    """`IsError` HEADs only keys ending in `.pb`: a prefix with none reads as no error, as on any store."""
    prefix = MemoryPrefix([("errors.txt", b"x"), ("outputs.pb", b"")], location="s3://my-bucket/p")
    read = reader_for(EARLIEST, store=AWS).read(prefix)
    assert read.round_error is None and read.error is None and read.ignored == ("errors.txt",)


def test_a_listed_name_go_cannot_parse_fails_head_with_go_s_parse_error():
    """`DataReference.Split` -> `url.Parse`: a control byte or a "%" that starts no escape in the raw name fails
    first, quoted as Go's %q quotes it (the fragment cut off unless it is what failed)."""
    for key, problem in [
        ("error-\x01.pb", 'parse "https://s3-eu-west-1.amazonaws.com/my-bucket/p/error-\\x01.pb": '
         "net/url: invalid control character in URL"),
        ("error-%zz.pb", 'parse "https://s3-eu-west-1.amazonaws.com/my-bucket/p/error-%zz.pb": '
         'invalid URL escape "%zz"'),
        ("error#%z.pb", 'parse "https://s3-eu-west-1.amazonaws.com/my-bucket/p/error#%z.pb": invalid URL escape "%z."'),
        # unescape's EscapeError holds the three bytes from the "%", quoted by strconv.Quote
        ("error%€.pb", 'parse "https://s3-eu-west-1.amazonaws.com/my-bucket/p/error%€.pb": '
         'invalid URL escape "%\\xe2\\x82"'),
        ("error?%zz.pb", None),  # in the query, which Parse does not unescape: the container error
        ("error-%41.pb", None),
    ]:  # fmt: skip
        prefix = MemoryPrefix([(key, error_document_bytes(timestamp_ns=T0))], location="s3://my-bucket/p")
        read = reader_for(EARLIEST, store=AWS).read(prefix)
        listed = f"https://s3-eu-west-1.amazonaws.com/my-bucket/p/{key}"
        assert read.round_error == f"failed to read error file @[{listed}]: {problem or REFUSED}", key


@given(st.text(max_size=12))
def test_go_quote_matches_go_s_strconv_quote_on_ascii(text):
    """strconv.Quote: printable ASCII as is, `"` and `\\` escaped, \\a \\b \\f \\n \\r \\t \\v, other control bytes
    as \\xNN (Go's own table: `appendEscapedRune`)."""
    quoted = go_quote(text)
    assert quoted.startswith('"') and quoted.endswith('"')
    if text.isascii():
        expected = "".join(
            {'"': '\\"', "\\": "\\\\", "\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t",
             "\v": "\\v"}.get(c) or (c if " " <= c <= "~" else f"\\x{ord(c):02x}")
            for c in text
        )  # fmt: skip
        assert quoted == f'"{expected}"'


def test_go_url_parse_accepts_what_go_accepts():
    assert go_url_host("https://h/b/k%41?q=%zz") == b"h"  # the query is not unescaped by Parse
    assert go_url_host("https://h/b/k#frag\x01") == b"h"  # nor is the fragment checked for control bytes
    assert go_url_host("s3:///p") == b"" and go_url_host("s3:opaque/p") == b""


# --- the names in messages (List's names: s3:// and gs:// escaped) -----------------------------------------------


def test_gcs_names_are_escaped_as_stow_s_google_item_url_is():
    """flyteorg/stow google `prepUrl` (since #17): `url.URL{Scheme: "gs", Host: bucket, Path: name}`, whose String()
    escapes the path; flytestdlib's List returns `item.URL().String()` for it (only scheme "google" was rewritten)."""
    assert PropellerStore().listed_reference("gs://bucket/run/0", "error #1.pb") == "gs://bucket/run/0/error%20%231.pb"
    assert AWS.listed_reference("s3://b/run", "error #1.pb") == "https://s3-eu-west-1.amazonaws.com/b/run/error #1.pb"


# --- the whole run: aggregation on AWS S3 aborts the workflow -------------------------------------------------------


def test_with_aggregation_on_aws_s3_a_preempted_run_aborts_and_without_it_is_retried(tmp_path):
    """The seed preemption on a deployment whose store is AWS S3: with the earliest reader every round fails on the
    recoverable error file until max-workflow-retries aborts the workflow; the default reader reads error.pb and the
    node retries."""
    storage = "storage: {container: my-bucket}\n"
    for flag, phase in (("true", "FAILED_PERMANENTLY"), ("false", "RETRIED_THEN_SUCCEEDED")):
        config = tmp_path / f"aggregation-{flag}.yaml"
        config.write_text(storage + f"plugins: {{k8s: {{enable-distributed-error-aggregation: {flag}}}}}\n")
        scenario = str(SCENARIOS / "preemption_during_training.textproto")
        command = [AGGSIM, "simulate", scenario, "--plugin", "recoverable", "--propeller-config", str(config)]
        done = subprocess.run([*command, "--expect", phase], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        if flag == "true":
            assert "Dynamic loading is disabled" in done.stdout and "Workflow abort failed" in done.stdout


def test_explain_names_the_store_s_refusal(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("storage: {container: my-bucket}\nplugins: {k8s: {enable-distributed-error-aggregation: true}}\n")
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "error-a.pb").write_bytes(error_document_bytes(timestamp_ns=T0))
    explanation = explain_prefix(tmp_path / "p", EARLIEST, config=load_deployment([str(config)]).propeller_config())
    assert explanation.outcome.round_error.endswith(
        "Conf container:my-bucket != Passed Container:s3-us-east-1.amazonaws.com. Dynamic loading is disabled: "
        "not found"
    )


# --- a prefix in another bucket (StowStore.getContainer) -------------------------------------------------------------


@pytest.mark.parametrize("store", [AWS, PropellerStore(StoreKind.AS_NAMED, "my-bucket")], ids=["aws", "endpoint"])
def test_a_prefix_outside_the_configured_container_fails_both_readers_before_the_store_is_asked(store):
    """flytestdlib `StowStore.List` and `StowStore.Head` both call `getContainer` with the container
    `DataReference.Split` takes from the URL's host: with dynamic loading off, any bucket but `storage.container` is
    refused. The earliest reader's listing fails (`IsError`: "failed to list error files"), the default reader's
    HEAD of the error.pb it builds too ("failed to read error file"); whatever the prefix holds."""
    location = "s3://other-bucket/metadata/n0/0"
    refused = "Conf container:my-bucket != Passed Container:other-bucket. Dynamic loading is disabled: not found"
    earliest = reader_for(EARLIEST, store=store).read(_two_errors(location))
    assert (earliest.rule, earliest.candidates) == (RULE_ROUND_ERROR, ())
    assert earliest.round_error == f"failed to list error files @[{location}]: {refused}"
    default = reader_for(DEFAULT, store=store).read(_two_errors(location))
    assert default.round_error == f"failed to read error file @[{location}/error.pb]: {refused}"
    # the configured bucket is read as ever; so is a local copy (a path: named in the configured container)
    assert reader_for(DEFAULT, store=store).read(_two_errors()).error.code == "USER:RuntimeError"
    assert reader_for(DEFAULT, store=store).read(_two_errors("/tmp/copy")).error.code == "USER:RuntimeError"


@pytest.mark.parametrize(
    "text, reads",
    [
        # enable-multicontainer: getContainer loads another bucket instead of refusing it
        ("storage: {container: my-bucket, enable-multicontainer: true, connection: {endpoint: 'http://m:9'}}", True),
        ("storage: {container: my-bucket, connection: {endpoint: 'http://m:9'}}", False),
        ("storage: {container: my-bucket}", False),  # AWS S3: refused at the listing, before any naming matters
        # an in-memory store is no stow store: it opens no container and refuses none
        ("storage: {type: mem, container: my-bucket}", True),
    ],
)
def test_whether_another_bucket_is_refused_follows_the_deployment(tmp_path, text, reads):
    store = _store(tmp_path, text)
    read = reader_for(DEFAULT, store=store).read(_two_errors("s3://other-bucket/p"))
    assert (read.round_error is None) is reads, read.round_error
    if not reads:
        assert "Passed Container:other-bucket. Dynamic loading is disabled" in read.round_error


def test_the_bucket_is_read_from_the_url_as_go_s_url_parse_reads_the_host():
    """`DataReference.Split` -> `url.Parse`: the host ends at the path, query or fragment; a port stays in it, the
    userinfo does not; a port that is no number fails the parse; a local copy, however spelled, is no bucket."""
    store = PropellerStore(StoreKind.AS_NAMED, "my-bucket")
    assert store.container_error("s3://my-bucket?x=1/p") is None
    assert store.container_error("s3://user@my-bucket/p") is None
    assert "Passed Container:my-bucket:9000." in store.container_error("s3://my-bucket:9000/p")
    assert "Passed Container:My-Bucket." in store.container_error("s3://My-Bucket/p")  # Go keeps the case
    assert store.container_error("s3://b:abc/p") == 'parse "s3://b:abc/p": invalid port ":abc" after host'
    for copy in ("/tmp/copy", "file:/tmp/copy", "file:///tmp/copy", "file://localhost/tmp/copy", "relative/copy"):
        assert store.container_error(copy) is None, copy


@pytest.mark.parametrize(
    "location, error",
    [
        # parseHost unescapes in host mode: an escape may stand for a non-ASCII byte (or be %25), nothing else
        ("s3://my%41bucket/p", 'parse "s3://my%41bucket/p": invalid URL escape "%41"'),
        ("s3://my-bucket%/p", 'parse "s3://my-bucket%/p": invalid URL escape "%"'),
        ("s3://my bucket/p", 'parse "s3://my bucket/p": invalid character " " in host name'),
        ("s3://my-bucket|x/p", 'parse "s3://my-bucket|x/p": invalid character "|" in host name'),
        # the port is checked before the host is unescaped, the host before the userinfo, both before the path
        ("s3://bad%zz:xx/p", 'parse "s3://bad%zz:xx/p": invalid port ":xx" after host'),
        ("s3://u ser@b%41/p", 'parse "s3://u ser@b%41/p": invalid URL escape "%41"'),
        ("s3://u ser@my-bucket/p%zz", 'parse "s3://u ser@my-bucket/p%zz": net/url: invalid userinfo'),
        ("s3://u%zz@my-bucket/p", 'parse "s3://u%zz@my-bucket/p": invalid URL escape "%zz"'),
        ("s3://[::1/p", "parse \"s3://[::1/p\": missing ']' in host"),
        # a zone (RFC 6874, from "%25") may escape a byte a host holds as it is, or a space; not a non-ASCII one
        ("s3://[fe80::1%25%65n%200]/p", "Conf container:my-bucket != Passed Container:[fe80::1%en 0]. Dynamic "
         "loading is disabled: not found"),
        ("s3://[fe80::1%25en%C3]/p", 'parse "s3://[fe80::1%25en%C3]/p": invalid URL escape "%C3"'),
        # a scheme is ASCII letters: the Kelvin sign is no "k" (Go reads bytes), so this has no scheme
        ("s\u212a://my-bucket/p", 'parse "s\u212a://my-bucket/p": first path segment in URL cannot contain colon'),
        # the fragment last, quoted with it
        ("s3://my-bucket/p#%zz", 'parse "s3://my-bucket/p#%zz": invalid URL escape "%zz"'),
        # the container is the host unescaped
        ("s3://my-b%C3%A9/p", "Conf container:my-bucket != Passed Container:my-b\u00e9. Dynamic loading is disabled: "
         "not found"),
        ("s3://my%25bucket/p", "Conf container:my-bucket != Passed Container:my%bucket. Dynamic loading is disabled: "
         "not found"),
    ],
)  # fmt: skip
def test_the_bucket_s_host_is_unescaped_and_checked_as_go_s_parse_host_does(location, error):
    """net/url `parseHost` and `unescape(host, encodeHost)` (RFC 3986: a host %-encodes non-ASCII bytes only), in the
    order `parse` and `parseAuthority` check a URL; `DataReference.Split` compares the unescaped host."""
    assert PropellerStore(StoreKind.AS_NAMED, "my-bucket").container_error(location) == error


def test_an_escaped_host_is_compared_unescaped_and_shown_as_go_prints_its_bytes():
    assert PropellerStore(StoreKind.AS_NAMED, "my-bé").container_error("s3://my-b%C3%A9/p") is None
    shown = PropellerStore(StoreKind.AS_NAMED, "my-bucket").container_error("s3://my%C3/p")
    assert "Passed Container:my\\xc3." in shown
    shown.encode("utf-8")  # printable and storable: no lone surrogate


def test_on_a_succeeded_job_the_other_bucket_is_refused_first_at_the_futures_head():
    """flytepropeller `nodes/task/handler.go` `invokePlugin`: before `ValidateOutput`, the task handler HEADs
    `futures.pb` (`FutureFileReader.Exists`, flytestdlib `errors.Wrapf`); its failure is the round's error."""
    config = PropellerConfig(store=PropellerStore(StoreKind.AS_NAMED, "my-bucket"))
    for strategy in (DEFAULT, EARLIEST):
        explanation = explain_prefix(_two_errors("s3://other-bucket/p"), strategy, config=config)
        assert explanation.outcome.round_error == (
            "failed to check existence of futures file: [User] Failed to do HEAD on futures file., caused by: "
            "Conf container:my-bucket != Passed Container:other-bucket. Dynamic loading is disabled: not found"
        )
        assert explanation.requests == 0  # refused before the store is asked
        assert explanation.read.rule == RULE_FUTURES_HEAD_FAILED and explanation.not_read == ()
        assert explanation.outcome.reason == "the HEAD of futures.pb returned an error"
