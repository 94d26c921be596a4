"""The papers' target/head pairs and the tree settings each races at: the EAGLE-2 and DDD papers' settings, and
for the EAGLE-3 pair the official EAGLE-3 depth (7: eight draft calls, the root call included)."""
import explorer.choosing
from ddd.catalog import EAGLE3_DRAFT_CALLS, PAIRS, PAPERS_TREE_SETTINGS
from ddd.settings import Eagle2Settings, method_settings


def test_the_eagle3_pair_drafts_to_the_official_depth():
    eagle3 = next(p for p in PAIRS if p.head == "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B")
    settings = eagle3.tree_settings()
    assert EAGLE3_DRAFT_CALLS == 8 and settings["draft_calls"] == 8  # depth 7: the root call and seven more
    assert settings["max_draft_calls"] >= settings["draft_calls"]
    assert {k: v for k, v in settings.items() if k not in ("draft_calls", "max_draft_calls")} == \
        {k: v for k, v in PAPERS_TREE_SETTINGS.items() if k not in ("draft_calls", "max_draft_calls")}
    eagle2 = Eagle2Settings(**{s: settings[s] for s in ("beam_width", "draft_calls", "total_tokens")})
    eagle2.validate()
    method_settings("ddd", **{s: settings[s] for s in ("beam_width", "max_draft_calls", "check_steps", "threshold",
                                                       "total_tokens")}).validate()
    others = [p for p in PAIRS if p is not eagle3]
    assert all(p.tree_settings() == PAPERS_TREE_SETTINGS for p in others)
    assert PAPERS_TREE_SETTINGS["draft_calls"] == 6  # the EAGLE-2 and DDD papers' depth


def test_choosing_the_eagle3_pair_sets_its_depth_in_the_panel(page, monkeypatch):
    eagle3 = next(p for p in PAIRS if p.head == "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B")
    monkeypatch.setattr(page.runner.models, "device", lambda: "cuda")
    monkeypatch.setattr(explorer.choosing, "check_fits", lambda *args, **kwargs: None)
    out = page.ui.named(page.menu.choose(eagle3.label, "", ""))
    assert out["draft_calls"] == 8 and out["max_draft_calls"] >= 8
    vicuna = next(p for p in PAIRS if p.head == "yuhuili/EAGLE-Vicuna-7B-v1.3")
    assert page.ui.named(page.menu.choose(vicuna.label, "", ""))["draft_calls"] == 6
