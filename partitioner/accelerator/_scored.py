"""Plans scored before on a problem, read back instead of re-timed by the local search.

NOTE: [Scored plans] Under the physical model the latency and critical path of a plan are a
function of the plan alone (its ``part`` and ``devices_of``, the partition count included):
:class:`IncrementalCost` counts edge bytes in integers and recomputes a touched partition's
path from its members, so no history leaks into a result, and a test checks each try
against a full evaluation. The searches meet the same plan again and again: the KL pass's
first step tries the moves the descent's last sweep tried on the same plan, a move tried
from one plan and its reverse from the next lead back, and the starts of ``cost_aware``
and ``kl_based``'s refinement reach plans the earlier searches scored (a fifth to a
quarter of the tries below 100 op nodes). Such a try is read back from ``problem.scored``
instead of re-timed: the key is a hash kept per move (O(1) a try), and a hit is checked
against the stored plan (O(N) at C speed), so a collision is only a miss. A read-back try
still counts as an evaluation, so every search takes the same steps and returns the same
plan as without it (a test compares the two on random graphs).
"""

from __future__ import annotations

from typing import Any, Sequence

__all__ = ["SCORED_NODES", "SCORED_REFS", "scored_trial"]

SCORED_REFS = 1_000_000  # node entries the scored plans may hold (about 8 MB of references)
SCORED_NODES = 150  # graphs up to this size keep scored plans: the default budget affords them 9 or
# more tries a node, and a fifth of the tries meet a plan again; beyond, few do, and keying every
# try cost 4-8 % at 250-500 nodes


def scored_trial(s: Any, moves: Sequence[tuple[int, int]]) -> tuple[float, list[int]]:
    """(latency, critical path) of the search state ``s`` with ``moves`` applied (not kept): read
    back from ``s.scored`` when that plan was scored before, else timed and stored."""
    scored = s.scored
    part = s.part
    after = part.copy()
    key = s.part_hash ^ s.placement_hash
    for v, q in moves:
        key ^= hash((v, part[v])) ^ hash((v, q))
        after[v] = q
    found = scored.get(key)
    if found is not None and found[0] == tuple(after) and found[1] == s.placement:  # not a collision
        return found[2]  # type: ignore[no-any-return]
    result = s.inc.trial(moves)
    if (len(scored) + 1) * len(after) <= SCORED_REFS:
        # A tuple of ints: the collector stops tracking it (a list would be traversed at every
        # full collection, a cost that grows with the store).
        scored[key] = (tuple(after), s.placement, result)
    return result  # type: ignore[no-any-return]
