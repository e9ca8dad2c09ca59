"""The claims registry file (limits/claims/claims.toml) and its loader.

The loaded registry is checked against the judges and the report elsewhere (test_claims); here:
a file with a mistake in it is refused with one line naming the entry and the bad value."""

import tomllib
from importlib import resources

import pytest

from limits.claims import registry
from limits.errors import LimitsError


def _data():
  text = resources.files("limits.claims").joinpath(registry.CLAIMS_FILE).read_text("utf-8")
  return tomllib.loads(text)


def test_the_packaged_file_gives_the_registry():
  claims, readings, ambiguities = registry.parse_registry(_data())
  assert [c.id for c in claims] == [c.id for c in registry.CLAIMS]
  assert len(claims) == len({c.id for c in claims}) >= 20
  for c in claims:
    assert c.judge.__name__.startswith("judge_") and c.judge.__module__.startswith(
        "limits.claims.judges_")
    assert all(rd.ambig in ambiguities for rd in c.readings)
  # AMBIG-7 is a by-step reading: appended to every claim of its steps, and only to those.
  steps = set(_data()["readings"]["AMBIG-7"]["steps"])
  for c in claims:
    assert (readings["AMBIG-7"] in c.readings) == (c.step in steps), c.id


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d["claim"][0].update(judge="judge_nothing"), "names judge 'judge_nothing'"),
    (lambda d: d["claim"][0].update(kind="rumour"), "kind='rumour'"),
    (lambda d: d["claim"][3].update(readings=["AMBIG-99"]), "reading 'AMBIG-99'"),
    (lambda d: d["claim"][1].update(id=d["claim"][0]["id"]), "appears twice"),
    (lambda d: d["claim"][0].update(derived_from=["no-such-claim"]), "'no-such-claim'"),
    (lambda d: d["claim"][0].update(figur="x.png"), "unknown key(s) ['figur']"),
    (lambda d: d["claim"][0].pop("criterion"), "lacks ['criterion']"),
    (lambda d: d["ambiguities"].pop("AMBIG-1"), "AMBIG-1 is not listed under [ambiguities]"),
])
def test_a_mistake_in_the_file_is_one_line_naming_it(mutate, message):
  data = _data()
  mutate(data)
  with pytest.raises(LimitsError) as e:
    registry.parse_registry(data)
  assert message in str(e.value) and "\n" not in str(e.value)
  assert str(e.value).startswith("limits/claims/claims.toml: ")
