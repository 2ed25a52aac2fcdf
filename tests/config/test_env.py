from decimal import Decimal

import pytest
from django.core.exceptions import ImproperlyConfigured

from config.env import (
    env_bool,
    env_choice,
    env_cluster,
    env_decimal,
    env_int,
    env_list,
    env_networks,
    env_secret,
)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("1", True),
        ("true", True),
        ("Yes", True),
        ("on", True),
        ("0", False),
        ("off", False),
        ("", False),
        ("no", False),
    ],
)
def test_env_bool_parses_common_spellings(raw, expected):
    assert env_bool("X", not expected, environ={"X": raw}) is expected


def test_env_bool_rejects_nonsense_naming_the_variable():
    with pytest.raises(ImproperlyConfigured, match="FAIRSHARE_DEBUG='maybe'"):
        env_bool("FAIRSHARE_DEBUG", False, environ={"FAIRSHARE_DEBUG": "maybe"})


def test_env_bool_uses_default_when_unset():
    assert env_bool("X", True, environ={}) is True


def test_env_int_checks_type_and_bounds():
    assert env_int("N", 5, environ={"N": "7"}) == 7
    assert env_int("N", 5, environ={}) == 5
    with pytest.raises(ImproperlyConfigured, match="N='seven' is not an integer"):
        env_int("N", 5, environ={"N": "seven"})
    with pytest.raises(ImproperlyConfigured, match="at least 5"):
        env_int("N", 10, min_value=5, environ={"N": "4"})
    with pytest.raises(ImproperlyConfigured, match="at most 9"):
        env_int("N", 1, max_value=9, environ={"N": "10"})


def test_env_decimal_rejects_out_of_range_reserve():
    assert env_decimal("R", "0.1", environ={}) == Decimal("0.1")
    with pytest.raises(ImproperlyConfigured, match=r"R=1\.5 must be at most 0\.9"):
        env_decimal("R", "0.1", max_value=Decimal("0.9"), environ={"R": "1.5"})
    with pytest.raises(ImproperlyConfigured, match="not a number"):
        env_decimal("R", "0.1", environ={"R": "ten percent"})
    with pytest.raises(ImproperlyConfigured, match="finite"):
        env_decimal("R", "0.1", environ={"R": "NaN"})


def test_env_list_splits_and_strips():
    assert env_list("H", ["a"], environ={"H": " x.org, y.org ,,"}) == ["x.org", "y.org"]
    assert env_list("H", ["a"], environ={}) == ["a"]


def test_env_networks_accepts_addresses_and_cidrs_and_names_a_bad_entry():
    env = {"P": "10.0.0.0/8, 192.0.2.1,2001:db8::/32"}
    assert env_networks("P", environ=env) == ["10.0.0.0/8", "192.0.2.1/32", "2001:db8::/32"]
    assert env_networks("P", environ={}) == []
    with pytest.raises(ImproperlyConfigured, match=r"P: 'proxy\.local'"):
        env_networks("P", environ={"P": "10.0.0.0/8,proxy.local"})


def test_env_choice_names_allowed_values():
    assert env_choice("L", "INFO", ["INFO", "DEBUG"], environ={"L": "DEBUG"}) == "DEBUG"
    with pytest.raises(ImproperlyConfigured, match="L='LOUD' is not one of: INFO, DEBUG"):
        env_choice("L", "INFO", ["INFO", "DEBUG"], environ={"L": "LOUD"})


def test_env_secret_reads_file(tmp_path):
    secret = tmp_path / "key"
    secret.write_text("s3cret\n")
    assert env_secret("SECRET_KEY", environ={"SECRET_KEY_FILE": str(secret)}) == "s3cret"
    assert env_secret("SECRET_KEY", environ={"SECRET_KEY": "inline"}) == "inline"
    assert env_secret("SECRET_KEY", "dflt", environ={}) == "dflt"


def test_env_secret_rejects_both_and_missing_files(tmp_path):
    with pytest.raises(ImproperlyConfigured, match="only one of SECRET_KEY and SECRET_KEY_FILE"):
        env_secret("SECRET_KEY", environ={"SECRET_KEY": "a", "SECRET_KEY_FILE": "/x"})
    with pytest.raises(ImproperlyConfigured, match="SECRET_KEY_FILE="):
        env_secret("SECRET_KEY", environ={"SECRET_KEY_FILE": str(tmp_path / "missing")})


@pytest.mark.parametrize(
    "value",
    ["kubeconfig", "kubeconfig:/etc/kube.conf", "in-cluster", "disabled", "snapshot:/x.json"],
)
def test_env_cluster_accepts_modes(value):
    assert (
        env_cluster("FAIRSHARE_CLUSTER", "disabled", environ={"FAIRSHARE_CLUSTER": value}) == value
    )


@pytest.mark.parametrize("value", ["k8s", "snapshot:", "in-cluster:foo"])
def test_env_cluster_rejects_unknown_modes(value):
    with pytest.raises(ImproperlyConfigured, match="FAIRSHARE_CLUSTER"):
        env_cluster("FAIRSHARE_CLUSTER", "disabled", environ={"FAIRSHARE_CLUSTER": value})


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("FAIRSHARE_CAPACITY_RESERVE", "2", "FAIRSHARE_CAPACITY_RESERVE=2 must be at most 0.9"),
        ("FAIRSHARE_SHARE_VISIBILITY", "everyone", "FAIRSHARE_SHARE_VISIBILITY='everyone'"),
        ("FAIRSHARE_SEPARATION_OF_DUTIES", "lax", "FAIRSHARE_SEPARATION_OF_DUTIES='lax'"),
        ("FAIRSHARE_TRUSTED_PROXIES", "proxy.local", "FAIRSHARE_TRUSTED_PROXIES: 'proxy.local'"),
        ("FAIRSHARE_TOKEN_MAX_DAYS", "0", "FAIRSHARE_TOKEN_MAX_DAYS=0 must be at least 1"),
    ],
)
def test_settings_refuse_to_start_on_a_bad_variable(variable, value, message):
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        env={
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "SECRET_KEY": "x",
            variable: value,
            "PATH": "",
        },
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0
    assert message in result.stderr


def test_settings_require_a_secret_key_outside_debug():
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        env={"DJANGO_SETTINGS_MODULE": "config.settings", "PATH": ""},
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0
    assert "SECRET_KEY" in result.stderr
