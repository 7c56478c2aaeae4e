"""A deployment's own propeller configuration drives the verdict (flytepropeller config.go `Config`/`NodeConfig`,
flyteplugins flytek8s/config `K8sPluginConfig.EnableDistributedErrorAggregation`, flytestdlib storage
`LimitsConfig.GetLimitMegabytes`, read through flytestdlib's case-insensitive viper sections)."""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest
from conftest import AGGSIM, ROOT, T0
from hypothesis import given, settings
from hypothesis import strategies as st

from aggregation.deployment import DeploymentConfigError, load_deployment
from aggregation.documents import error_document_bytes
from aggregation.gonumbers import integer_value, parse_int, wrap
from aggregation.goyaml import resolve_plain

EXAMPLE = str(ROOT / "examples" / "propeller-config.yaml")


def aggsim(*args, expect=0, timeout=120):
    result = subprocess.run([AGGSIM, *args], capture_output=True, text=True, timeout=timeout)
    assert result.returncode == expect, result.stderr
    return result


@pytest.fixture
def two_files(tmp_path):
    """error.pb (last writer, NON_RECOVERABLE) and an earlier recoverable error-a.pb."""
    (tmp_path / "error.pb").write_bytes(error_document_bytes(code="USER:RuntimeError", timestamp_ns=T0 + 10**9))
    (tmp_path / "error-a.pb").write_bytes(
        error_document_bytes(code="USER:Recoverable", recoverable=True, timestamp_ns=T0)
    )
    return tmp_path


def write(tmp_path, text, name="config.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_the_deployment_s_flag_picks_the_reader(two_files, tmp_path):
    off = write(tmp_path, "plugins:\n  k8s:\n    enable-distributed-error-aggregation: false\n", "off.yaml")
    on = json.loads(aggsim("explain", str(two_files), "--propeller-config", EXAMPLE, "--json").stdout)
    assert on["strategy"] == "earliest" and on["error"]["code"] == "USER:Recoverable"
    flag_off = json.loads(aggsim("explain", str(two_files), "--propeller-config", off, "--json").stdout)
    assert flag_off["strategy"] == "default" and flag_off["error"]["code"] == "USER:RuntimeError"
    # a flag on the command line wins over the file; later files win over earlier ones
    forced = aggsim("explain", str(two_files), "--propeller-config", off, "--strategy", "earliest", "--json")
    assert json.loads(forced.stdout)["strategy"] == "earliest"
    merged = aggsim("explain", str(two_files), "--propeller-config", EXAMPLE, "--propeller-config", off, "--json")
    assert json.loads(merged.stdout)["strategy"] == "default"
    # flyteplugins v1.16.8 `defaultK8sConfig` leaves EnableDistributedErrorAggregation false: a deployment whose
    # files do not set it (or set it to null, which viper's AllSettings drops) runs the single error.pb reader
    for unset in (
        "propeller:\n  max-workflow-retries: 10\n",
        "plugins:\n  k8s:\n    enable-distributed-error-aggregation: ~\n",
    ):
        quiet = json.loads(
            aggsim("explain", str(two_files), "--propeller-config", write(tmp_path, unset), "--json").stdout
        )
        assert quiet["strategy"] == "default" and quiet["error"]["code"] == "USER:RuntimeError"


def test_max_download_mbs_from_the_file_or_the_flag_sets_the_size_limit(tmp_path):
    big = error_document_bytes(code="USER:Big", message="x" * (3 * 1024 * 1024), timestamp_ns=T0)
    (tmp_path / "error.pb").write_bytes(big)
    default = json.loads(aggsim("explain", str(tmp_path), "--strategy", "default", "--json").stdout)
    assert default["task_phase"] == "ROUND_FAILED" and "max allowed [2097152] bytes" in default["round_error"]
    with_file = json.loads(aggsim("explain", str(tmp_path), "--propeller-config", EXAMPLE, "--json").stdout)
    assert with_file["task_phase"] == "PERMANENT_FAILURE" and with_file["error"]["code"] == "USER:Big"
    flag = json.loads(aggsim("explain", str(tmp_path), "--max-download-mb", "3", "--json").stdout)
    assert flag["task_phase"] == "ROUND_FAILED"  # 3 MiB of message plus the rest is over 3 MiB
    flag = json.loads(aggsim("explain", str(tmp_path), "--max-download-mb", "4", "--json").stdout)
    assert flag["task_phase"] == "PERMANENT_FAILURE"


@pytest.mark.parametrize("mbs, limit", [(9_000_000_000_000, "-9,009,560,073,709,551,616"), (2**44 + 1, "1,048,576")])
def test_a_size_limit_that_wraps_in_propeller_s_int64_is_played_and_said(tmp_path, mbs, limit):
    """flyteplugins `remote_file_output_reader.go` `getMaxPayloadSize`: maxDownloadMBs * 1024 * 1024 in Go's int64
    wraps past 8,796,093,022,207 MB. The model plays the wrapped limit (a negative one fails every round), and says
    so on stderr, from the flag or from a file: the flag's help allows up to 2^63-1, which reads as no limit."""
    (tmp_path / "error.pb").write_bytes(error_document_bytes(code="USER:X", message="m", timestamp_ns=T0))
    config = write(tmp_path, f"storage:\n  limits:\n    maxDownloadMBs: {mbs}\n", "limits.yaml")
    for how in (["--max-download-mb", str(mbs)], ["--propeller-config", config]):
        done = aggsim("explain", str(tmp_path), "--strategy", "default", "--json", *how)
        assert json.loads(done.stdout)["task_phase"] == (
            "ROUND_FAILED" if limit.startswith("-") else "PERMANENT_FAILURE"
        )
        assert done.stderr.count("\n") == 1 and "aggsim: note: " in done.stderr, done.stderr
        assert f"wraps (getMaxPayloadSize) to a limit of {limit} bytes" in done.stderr
    assert aggsim("explain", str(tmp_path), "--max-download-mb", str(2**43 - 1)).stderr == ""  # the largest unwrapped


def test_sections_match_without_case_and_unknown_keys_are_ignored(tmp_path):
    path = write(
        tmp_path,
        "Storage:\n  Limits:\n    MAXDOWNLOADMBS: '7'\n  type: s3\n  container: b\nPropeller:\n  Node-Config:\n"
        "    max-node-retries-system-failures: 5\n  unrelated: {a: 1}\nadmin: {endpoint: dns:///x}\n",
    )
    deployment = load_deployment([path])
    config = deployment.propeller_config()
    assert config.max_payload_bytes == 7 * 1024 * 1024 and config.max_node_retries_system_failures == 5
    assert deployment.error_aggregation is False  # not set: Flyte's default (defaultK8sConfig leaves it false)


@pytest.mark.parametrize(
    "text, mbs",
    [
        ("storage: {limits: {maxDownloadMBs: 1, maxdownloadmbs: 5}}\n", 1),
        ("storage: {limits: {maxdownloadmbs: 5, maxDownloadMBs: 1}}\n", 1),
        # the whole section is replaced, not merged: the mixed-case one's has no limits
        ("storage:\n  limits: {maxDownloadMBs: 1}\nStorage:\n  type: s3\n  container: b\n", None),
        ("Storage:\n  type: s3\n  container: b\nstorage:\n  limits: {maxDownloadMBs: 1}\n", None),
    ],
)
def test_a_key_spelt_in_two_cases_keeps_the_mixed_case_value_whatever_the_order(tmp_path, text, mbs):
    """spf13/viper v1.21.0 `util.go` `insensitiviseMap`: ranging over the map, each key not all lower case is deleted
    and its value stored under the lower-cased key, so it replaces the lower-case spelling's value in either order
    of the range. PyYAML's mapping kept the spelling written last."""
    assert load_deployment([write(tmp_path, text)]).values.get("max_download_mbs") == mbs


@pytest.mark.parametrize(
    "text, message",
    [
        ("storage:\n  limits:\n    maxDownloadMBs: lots\n", "storage.limits.maxdownloadmbs: expected an integer"),
        # YAML 1.2 (Go's parser) reads yes as a string, and strconv.ParseBool refuses it: propeller does not start
        ("plugins:\n  k8s:\n    enable-distributed-error-aggregation: yes\n", "expected true or false (as Go's"),
        ("storage:\n  limits:\n    maxDownloadMBs: '08'\n", "expected an integer, got '08'"),  # octal has no 8
        # mapstructure `decodeInt` parses a string with strconv.ParseInt(s, 0, 32) for an int32 field: out of range
        (
            "propeller:\n  node-config:\n    default-max-attempts: '99999999999'\n",
            "'99999999999' does not fit the Go int32 field (strconv.ParseInt refuses it)",
        ),
        # YAML 1.1's base 60 (PyYAML's 90) is a string to Go's parser (resolve.go `resolve`), which ParseInt refuses
        ("propeller:\n  node-config:\n    default-max-attempts: 1:30\n", "expected an integer, got '1:30'"),
        ("propeller:\n  max-workflow-retries: 1e400\n", "expected an integer, got '1e400'"),  # ParseFloat overflows
        ("propeller:\n  max-workflow-retries: .inf\n", "inf has no int64 value (Go leaves converting it to the"),
        # an explicit tag must agree with what the scalar resolves to (resolve.go's deferred check)
        ("propeller:\n  max-workflow-retries: !!int 1:30\n", "not valid YAML (cannot decode !!str `1:30` as a !!int)"),
        ("plugins:\n  k8s:\n    enable-distributed-error-aggregation: '2'\n", "expected true or false"),
        ("plugins:\n  k8s:\n    enable-distributed-error-aggregation: ! '2'\n", "got '2'"),  # quoted: a string
        # `!!float` takes an int, not a uint64 (resolve.go's deferred check)
        ("propeller:\n  max-workflow-retries: !!float 18446744073709551615\n", "cannot decode !!int"),
        ("propeller:\n  max-workflow-retries: !!timestamp 10\n", "cannot decode !!int `10` as a !!timestamp"),
        ("propeller:\n  max-workflow-retries: !!binary MT\n", "!!binary value contains invalid base64 data"),
        # decode.go `mapping` checks every mapping it decodes, a merge source's too
        ("propeller: {<<: {max-workflow-retries: 1, max-workflow-retries: 2}}\n", "'max-workflow-retries' already"),
        ("propeller: {<<: {}, <<: {}}\n", "mapping key '<<' already defined"),
        ("propeller: [1, 2\n", "not valid YAML"),
        ("- a list\n", "expected a mapping"),
        # Go's YAML parser (go.yaml.in/yaml/v3, viper's) refuses a key given twice; PyYAML kept the last one
        ("storage:\n  limits:\n    maxDownloadMBs: 3\n  limits: {}\n", "line 4 not valid YAML (mapping key 'limits'"),
        # mapstructure cannot fill propeller's Config from a scalar: propeller would not start
        ("propeller: 5\n", "propeller: expected a section (a mapping), got 5"),
        ("storage:\n  limits: big\n", "storage.limits: expected a section (a mapping), got 'big'"),
        # two mixed-case spellings of one key: which one viper's lower-casing keeps is Go's random map order
        (
            "storage:\n  limits:\n    maxDownloadMBs: 1\n    MaxDownloadMBs: 5\n",
            "storage.limits: maxDownloadMBs and MaxDownloadMBs are one key to propeller (viper ignores case)",
        ),
        ("Plugins: {k8s: {}}\nPLUGINS: {k8s: {}}\n", "Plugins and PLUGINS are one key to propeller"),
        ("a: " + "{b: " * 3000 + "1" + "}" * 3000 + "\n", "nested too deeply to be a configuration file"),
    ],
)
def test_bad_configuration_is_one_line_naming_the_file_and_key(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(DeploymentConfigError, match=re.escape(message)):
        load_deployment([path])
    result = aggsim("explain", str(tmp_path), "--propeller-config", path, expect=2)
    assert message in result.stderr and path in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr


def test_simulate_and_sweep_play_the_scenario_on_the_deployment(tmp_path):
    record = json.loads(
        aggsim("simulate", "preemption_during_training_no_aggregation", "--propeller-config", EXAMPLE, "--json").stdout
    )
    assert record["error_aggregation"] is True and record["final_phase"] == "RETRIED_THEN_SUCCEEDED"
    sweep = json.loads(
        aggsim(
            "sweep",
            "preemption_during_training",
            "--vary",
            "timings.upload_seconds=0.05,3",
            "--propeller-config",
            EXAMPLE,
            "--json",
        ).stdout
    )
    assert {cell["aggregation"] for cell in sweep["cells"]} == {True}
    missing = aggsim("simulate", "preemption_during_training", "--propeller-config", str(tmp_path / "nope"), expect=2)
    assert "cannot read" in missing.stderr


def test_a_deployment_that_leaves_the_flag_unset_runs_flyte_s_default_in_every_command(tmp_path):
    """flyteplugins flytek8s/config/config.go (v1.16.8): `defaultK8sConfig` does not set
    `EnableDistributedErrorAggregation`, so a deployment whose files leave it out runs the single error.pb reader.
    One rule for every command: a scenario that says `error_aggregation: true` (sibling_user_error_cleanup), played
    on such a deployment, plays it off, as `explain` reads its files; only a command-line flag wins over the files."""
    flagless = write(tmp_path, "storage: {limits: {maxDownloadMBs: 2}}\n")
    written = json.loads(aggsim("simulate", "sibling_user_error_cleanup", "--plugin", "seed-pr", "--json").stdout)
    assert written["error_aggregation"] is True and written["final_phase"] == "FAILED_PERMANENTLY"
    on_it = json.loads(
        aggsim(
            "simulate", "sibling_user_error_cleanup", "--plugin", "seed-pr", "--propeller-config", flagless, "--json"
        ).stdout
    )
    assert on_it.get("error_aggregation", False) is False and on_it["final_phase"] == "RETRIED_THEN_SUCCEEDED"
    overridden = json.loads(
        aggsim(
            "simulate",
            "sibling_user_error_cleanup",
            "--plugin",
            "seed-pr",
            "--propeller-config",
            flagless,
            "--aggregation",
            "--json",
        ).stdout
    )
    assert overridden["error_aggregation"] is True and overridden["final_phase"] == "FAILED_PERMANENTLY"
    vary = ("--vary", "timings.upload_seconds=0.05,3", "--propeller-config", flagless, "--json")
    sweep = json.loads(aggsim("sweep", "sibling_user_error_cleanup", *vary).stdout)
    assert {cell["aggregation"] for cell in sweep["cells"]} == {False}
    refused = aggsim(
        "prove",
        "sibling_user_error_cleanup",
        "--claim",
        "genuine-error-wins",
        "--vary",
        "propeller.error_aggregation=true,false",
        "--propeller-config",
        flagless,
        expect=2,
    )
    assert "leaves it unset (Flyte's default, off) in every case" in refused.stderr


def test_a_yaml_alias_bomb_is_refused_as_go_s_parser_refuses_it(tmp_path):
    """go.yaml.in/yaml/v3 `decoder.unmarshal` fails "document contains excessive aliasing" once, past 1,000 decoded
    nodes and 100 through aliases, more than 99% came through aliases: propeller would not start. 630 bytes that
    expand 9**8-fold are refused at once (they took 39 s and 5 GB); a file with a few aliases is read as written."""
    lines = ["l0: &l0 {a: 1, b: 1, c: 1, d: 1, e: 1, f: 1, g: 1, h: 1, i: 1}"]
    for i in range(1, 8):
        lines.append(f"l{i}: &l{i} {{" + ", ".join(f"{k}: *l{i - 1}" for k in "abcdefghi") + "}")
    bomb = write(tmp_path, "\n".join(lines) + "\n", "bomb.yaml")
    refused = aggsim("explain", str(tmp_path), "--propeller-config", bomb, expect=2, timeout=20)
    said = "document contains excessive aliasing (Go's YAML parser refuses it: propeller would not start)"
    assert refused.stderr == f"aggsim: {bomb}: {said}\n"
    few = "limits: &limits\n  maxDownloadMBs: 1\nstorage:\n  limits: *limits\nother: *limits\n"
    assert load_deployment([write(tmp_path, few, "few.yaml")]).values["max_download_mbs"] == 1


@pytest.mark.parametrize(
    "setting, value, read",
    [
        ("enable-distributed-error-aggregation", "2", True),  # decodeBool: an int that is not 0
        ("enable-distributed-error-aggregation", "0", False),
        ("enable-distributed-error-aggregation", '"t"', True),  # strconv.ParseBool
        ("enable-distributed-error-aggregation", '"F"', False),
        ("enable-distributed-error-aggregation", '""', False),  # "" is false
        ("enable-distributed-error-aggregation", "TRUE", True),
        ("maxDownloadMBs", '"010"', 8),  # decodeInt: strconv.ParseInt(s, 0, 64), a leading 0 is octal
        ("maxDownloadMBs", '"0x10"', 16),
        ("maxDownloadMBs", "2.9", 2),  # a float truncated
        ("maxDownloadMBs", "true", 1),  # a bool is 1 or 0
        ("maxDownloadMBs", "1e3", 1000),  # Go's parser reads a float (PyYAML's YAML 1.1, a string)
        ("maxDownloadMBs", "08", 8),  # not octal: Go's parser reads the float 8
        ("maxDownloadMBs", "!!float 2", 2),
        ("maxDownloadMBs", "! 1e3", 1000),  # `!` is no tag: a plain scalar is typed as any other
        ("enable-distributed-error-aggregation", "! 2", True),
        ("maxDownloadMBs", "!foo 10", 10),  # another tag leaves the text a string, which decodeInt parses
        ("maxDownloadMBs", "!!binary MTA=", 10),  # "10", base64
        ("maxDownloadMBs", "!!str 0x10", 16),
    ],
)
def test_values_are_typed_as_flytestdlib_s_weak_decoder_reads_them(tmp_path, setting, value, read):
    """flytestdlib v1.16.8 `config/viper/viper.go` decodes with `WeaklyTypedInput` (go-viper/mapstructure v2.4.0
    `decodeBool`, `decodeInt`), after Go's YAML parser (YAML 1.2) has typed the scalars."""
    section = "plugins:\n  k8s:\n" if setting.startswith("enable") else "storage:\n  limits:\n"
    values = load_deployment([write(tmp_path, f"{section}    {setting}: {value}\n")]).values
    name = "error_aggregation" if setting.startswith("enable") else "max_download_mbs"
    assert values[name] == read and type(values[name]) is type(read)


@pytest.mark.parametrize(
    "plain, typed",
    [
        ("1:30", "1:30"),  # YAML 1.1's base 60 is gone: a string
        ("yes", "yes"),
        ("1e3", 1000.0),  # no dot needed: yamlStyleFloat
        ("1.5e3", 1500.0),  # nor a sign in the exponent
        ("08", 8.0),  # not octal, so ParseInt fails; a float
        ("010", 8),  # ParseInt(s, 0, 64): a leading 0 is octal
        ("0o10", 8),
        ("+_1", 1),  # underscores go before parsing
        ("_1", "_1"),  # no hint for "_": a string
        ("0b-101", -5),  # the digits after "0b" parsed again in base 2, sign and all
        ("0x", "0x"),
        ("18446744073709551615", 18446744073709551615),  # a uint64
        ("18446744073709551616", 1.8446744073709552e19),  # past uint64: a float
        ("1e400", "1e400"),  # ParseFloat overflows: a string
        (".5_0", 0.5),
        ("~", None),
        ("TRUE", True),
        ("on", "on"),
    ],
)
def test_plain_scalars_are_typed_as_go_s_yaml_parser_types_them(plain, typed):
    """go.yaml.in/yaml/v3 v3.0.4 `resolve.go` `resolve` (viper v1.21.0's parser), not PyYAML's YAML 1.1 rules."""
    got = resolve_plain(plain)
    assert got == typed and type(got) is type(typed)


def test_an_integer_too_wide_for_its_go_field_keeps_its_low_bits_and_aggsim_says_so(tmp_path_factory, two_files):
    """mapstructure v2.4.0 `decodeInt` stores an int through reflect's `Value.SetInt`, which converts it to the
    field's width: DefaultMaxAttempts (int32, flytepropeller `config.go` `NodeConfig`) set to 2**32 + 2 holds 2, and
    MaxNodeRetriesOnSystemFailures (int64) set to 2**64 - 1 (a uint64 to Go's parser) holds -1. Propeller starts
    and runs with those; the model does too, and says so on stderr."""
    text = (
        "propeller:\n  node-config:\n    default-max-attempts: 4294967298\n"
        "    max-node-retries-system-failures: 18446744073709551615\n"
    )
    configs = tmp_path_factory.mktemp("configs")
    path = write(configs, text)
    deployment = load_deployment([path])
    assert deployment.values["default_max_attempts"] == 2
    assert deployment.values["max_node_retries_system_failures"] == -1
    assert deployment.propeller_config().default_max_attempts == 2
    result = aggsim("explain", str(two_files), "--propeller-config", path)
    assert (
        f"aggsim: note: {path}: propeller.node-config.default-max-attempts: 4294967298 does not fit the Go int32 "
        "field: propeller runs with its low 32 bits, 2\n"
    ) in result.stderr
    # and the number held is one propeller compares as a uint32 (nodes/executor.go NewExecutor): said on the same line
    assert (
        "int64 field: propeller runs with its low 64 bits, -1; max-node-retries-system-failures -1 is no uint32: "
        "propeller compares uint32(-1) = 4,294,967,295"
    ) in result.stderr
    # a later file that sets the value again takes the note back
    later = write(configs, "propeller:\n  node-config:\n    default-max-attempts: 3\n", "later.yaml")
    assert [note for note in load_deployment([path, later]).notes if "default-max-attempts" in note] == []


def _cpython_reads(text: str):
    """The same literal read by CPython's `int(s, 0)`, whose rules (prefixes, an underscore only between digits or
    after a prefix) are Go's but for a bare leading 0, which Go reads as octal."""
    sign, body = (text[0], text[1:]) if text[:1] in ("+", "-") else ("", text)
    if len(body) > 1 and body[0] == "0" and body[1] not in "bBoOxX":
        body = "0o" + body[1:]
    try:
        return int(sign + body, 0)
    except ValueError:
        return None


@settings(max_examples=3000, deadline=None)
@given(st.text(alphabet="0123456789abfoxBOX_+-", max_size=12))
def test_integers_parse_as_go_s_strconv_does(text):
    """Go's `strconv` `ParseInt(s, 0, 64)` (`atoi.go`, with `underscoreOK`), as both Go's YAML parser and
    mapstructure's `decodeInt` call it, against an independent reader of the same literal syntax."""
    assert integer_value(text) == _cpython_reads(text)
    expected = _cpython_reads(text)
    in_range = expected is not None and -(1 << 63) <= expected < 1 << 63
    assert parse_int(text) == (expected if in_range else None)
    assert wrap(expected or 0, 32) == ((expected or 0) + (1 << 31)) % (1 << 32) - (1 << 31)


@pytest.mark.parametrize(
    "text, read",
    [
        ("propeller: !!int {max-workflow-retries: 5}\n", 5),  # a tag on a mapping is ignored (decode.go `unmarshal`)
        ("a: &x 1\nb: &x 7\npropeller: {max-workflow-retries: *x}\n", 7),  # an anchor defined again: the new one
        ("a: &k max-workflow-retries\npropeller: {*k : 3, max-workflow-retries: 4}\n", 4),  # an alias key is its own
        ("m: &m {max-workflow-retries: 8}\npropeller: {! <<: *m}\n", 8),  # `! <<` merges
        ("m: &m {max-workflow-retries: 8}\npropeller: {<<: *m, max-workflow-retries: 9}\n", 9),  # its own key wins
        ("x: !!timestamp 2001-12-14\npropeller: {max-workflow-retries: 6}\n", 6),
        ("propeller:\n  node-config: {\u0130gnore-retry-cause: 1}\n", True),  # Go's strings.ToLower: "İ" is "i"
        # yaml.go `Unmarshal` decodes the first document only: what follows a `---` is never read, valid YAML or not
        ("propeller: {max-workflow-retries: 2}\n---\npropeller: {max-workflow-retries: 3}\n", 2),
        ("propeller: {max-workflow-retries: 2}\n---\n# a second document\n: : bad [\n", 2),
        ("# a comment is no document\n---\npropeller: {max-workflow-retries: 4}\n---\n", 4),
    ],
)
def test_documents_go_s_parser_accepts_are_read_as_it_reads_them(tmp_path, text, read):
    """go.yaml.in/yaml/v3 v3.0.4 `decode.go` (`parser.node`, `mapping`, `unmarshal`, `merge`) and viper's
    `insensitiviseMap` (strings.ToLower), where PyYAML alone refused the file or read it otherwise."""
    values = load_deployment([write(tmp_path, text)]).values
    assert list(values.values()) == [read]


def test_only_the_first_document_of_a_file_is_read_even_when_it_is_empty(tmp_path):
    """An explicit empty first document is the whole configuration viper reads (yaml.go `Unmarshal`): the flag set in
    the second is not, so propeller runs Flyte's default reader. PyYAML refused every file with a second document
    ("but found another document"), with the flag on or off."""
    values = load_deployment(
        [write(tmp_path, "---\n...\n---\nplugins: {k8s: {enable-distributed-error-aggregation: true}}\n")]
    )
    assert values.values == {}
    done = subprocess.run(
        [
            AGGSIM,
            "explain",
            str(ROOT / "examples/prefixes/preempted_pair"),
            "--propeller-config",
            write(tmp_path, "plugins: {k8s: {enable-distributed-error-aggregation: true}}\n---\nx: [\n"),
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0 and "(earliest strategy)" in done.stdout.splitlines()[0], done


def test_a_config_that_is_a_fifo_or_a_directory_is_refused_at_once_not_waited_on(tmp_path):
    """A FIFO nothing writes to blocked `--propeller-config` for good (a scenario or a timings profile there is
    refused at once: `scenario.read_text_file`); now it is one line and exit 2, as a directory is."""
    fifo = tmp_path / "config.yaml"
    os.mkfifo(fifo)
    refused = aggsim("simulate", "preemption_during_training", "--propeller-config", str(fifo), expect=2, timeout=60)
    assert refused.stderr.strip().count("\n") == 0, refused.stderr
    assert f"{fifo}: not a regular file" in refused.stderr
    with pytest.raises(DeploymentConfigError, match="cannot read|not a regular file"):
        load_deployment([str(tmp_path)])
