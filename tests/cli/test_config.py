"""taxbreak/config.py: each setting from the option, else its environment variable, else the nearest taxbreak.toml
(relative paths against the file's folder), else the default; a bad file or value is refused naming where it is."""

from __future__ import annotations

from pathlib import Path

import pytest

from taxbreak.config import SETTINGS, ConfigError, Paths, find_config_file, setting


@pytest.fixture
def clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for s in SETTINGS.values():
        monkeypatch.delenv(s.env, raising=False)
    monkeypatch.delenv("TAXBREAK_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_defaults_without_a_file(clean: Path) -> None:
    assert find_config_file() is None
    assert Paths.from_env() == Paths(lake=Path("warehouse/lake"), warehouse=Path("warehouse/taxbreak.duckdb"),
                                     inbox=Path("warehouse/inbox"), cache=Path("warehouse/cache"))
    assert setting("analysis.t_sys_ns").value is None and setting("analysis.t_sys_ns").origin == "default"
    assert setting("sql.unrestricted").value is False


def test_precedence_and_relative_paths(clean: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (clean / "proj" / "sub").mkdir(parents=True)
    toml = clean / "proj" / "taxbreak.toml"
    toml.write_text('[paths]\nhome = "data"\nlake = "/abs/lake"\n[analysis]\nt_sys_ns = 4400\n'
                    '[sql]\nunrestricted = true\n')
    monkeypatch.chdir(clean / "proj" / "sub")
    assert find_config_file() == toml
    paths = Paths.from_env()
    assert paths.lake == Path("/abs/lake")
    assert paths.warehouse == clean / "proj" / "data" / "taxbreak.duckdb"  # home relative to the file's folder
    assert paths.origins()["lake"] == str(toml) and paths.origins()["warehouse"] == "default"
    assert setting("analysis.t_sys_ns").value == 4400 and setting("sql.unrestricted").value is True
    monkeypatch.setenv("TAXBREAK_T_SYS_NS", "4300")
    monkeypatch.setenv("TAXBREAK_HOME", str(clean / "envhome"))
    assert setting("analysis.t_sys_ns").value == 4300
    assert setting("analysis.t_sys_ns", 4100).value == 4100  # an option wins over both
    assert Paths.from_env().inbox == clean / "envhome" / "inbox" and Paths.from_env().lake == Path("/abs/lake")
    monkeypatch.setenv("TAXBREAK_SQL_UNRESTRICTED", "0")
    assert setting("sql.unrestricted").value is False


def test_bad_files_and_values_name_where(clean: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    toml = clean / "taxbreak.toml"
    toml.write_text("[analysis]\nt_sys_ns = 'fast'\n")
    with pytest.raises(ConfigError, match=f"{toml}: analysis.t_sys_ns must be int, got 'fast'"):
        setting("analysis.t_sys_ns")
    toml.write_text("[analysis]\nt_sys_ns = -5\n")
    with pytest.raises(ConfigError, match="must not be negative"):
        setting("analysis.t_sys_ns")
    toml.write_text("[analysis\n")
    with pytest.raises(ConfigError, match=f"{toml}: not valid TOML"):
        setting("analysis.t_sys_ns")
    toml.write_text("t_sys_ns = 1\n")
    with pytest.raises(ConfigError, match="'t_sys_ns' must be a table"):
        setting("analysis.t_sys_ns")
    monkeypatch.setenv("TAXBREAK_CONFIG", str(clean / "missing.toml"))
    with pytest.raises(ConfigError, match="TAXBREAK_CONFIG names .*missing.toml, which is not a file"):
        setting("analysis.t_sys_ns")
