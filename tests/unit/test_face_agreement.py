"""converters.face.agreement: the report's arithmetic (the real run: integration)."""

from __future__ import annotations

import pytest

from converters.face.agreement import AgreementReport, FaceRow, PairRow


def _pair(same, ref, ours, t=0.6):
    return PairRow("a", "b", same, ref, ours, None if ref is None else ref <= t, None if ours is None else ours <= t)


def test_report_counts_agreement_only_over_pairs_both_decided():
    rep = AgreementReport(threshold=0.6, images=2)
    rep.faces = [
        FaceRow("i1", "x", True, True, 0.7, 0.1),
        FaceRow("i2", "x", True, True, 0.6, 0.3),
        FaceRow("i2", "y", False, True, None, None),
    ]
    rep.pairs = [
        _pair(True, 0.4, 0.5),  # both same: agree
        _pair(False, 0.7, 0.59),  # reference different, ours same: disagree
        _pair(False, 0.9, 0.8),  # agree
        _pair(False, None, 0.8),  # reference missed a face: not counted
        _pair(True, 0.6, 0.6),  # at the threshold counts as same (<=), as face_recognition
    ]
    s = rep.summary()
    assert s["pairs_decided_by_both"] == 4 and s["pairs_undecided_by_reference"] == 1
    assert s["pairs_disagreeing"] == 1
    assert s["decision_agreement"] == pytest.approx(3 / 4)
    assert rep.agreement(same=True) == 1.0 and rep.agreement(same=False) == pytest.approx(1 / 2)
    assert s["accuracy_reference"] == pytest.approx(4 / 4)
    assert s["accuracy_ours"] == pytest.approx(4 / 5)
    assert s["faces_missed_by_reference"] == 1 and s["faces_missed_by_ours"] == 0
    assert s["descriptor_distance_mean"] == pytest.approx(0.2) and s["descriptor_distance_max"] == 0.3
    assert s["goal_met"] is False
    md = rep.to_markdown(max_pair_rows=2)
    assert "| decision_agreement | 0.7500 |" in md
    assert md.index("| a | b | no | 0.7000 | 0.5900 | no | yes | no |") < md.index("## Pairs") + 400
    d = rep.to_dict()
    assert [p["agree"] for p in d["pairs"]] == [True, False, True, None, True]
