"""A bounded run of the adversarial API campaign (``tests/api_fuzz.py``): random calls of every public op with
valid, extreme and wrong arguments, each in a child interpreter. No crash, hang, NaN/inf from finite input, or
exception that is not a relaxops check may occur. ``python tests/api_fuzz.py --cases 5000 --seed N`` runs a
longer campaign with fresh seeds."""

import os

import api_fuzz

# ~0.1 s a case on 2 cores; the long profile runs ten times as many.
CASES = 3000 if os.environ.get("HYPOTHESIS_PROFILE") == "long" else 300


def test_api_campaign_finds_nothing():
    res = api_fuzz.campaign(seed=0, cases=CASES, case_timeout=120)
    assert not res["findings"], "\n".join(map(str, res["findings"][:20])) + f"\ncounts: {res['counts']}"
    assert res["counts"].get("ok", 0) >= CASES // 3, f"too few cases ran to the end: {res['counts']}"
