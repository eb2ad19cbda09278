"""``--batch-size auto``: the largest batch that fits, by doubling then binary search.

"Fits" means: a short training run at that batch size raises no out-of-memory error and, when a
memory budget is given, its measured peak stays within the budget.
"""

from __future__ import annotations

from collections.abc import Callable


def largest_fitting(fits: Callable[[int], bool], start: int, cap: int = 1 << 16) -> int | None:
    """Largest batch size ``b <= cap`` with ``fits(b)``, assuming fitting is monotonic in b.

    Doubles from ``start`` (or halves down when ``start`` does not fit), then bisects the gap
    between the last size that fit and the first that did not, until it is within 1/16 of
    the answer (so twice the answer never fits). None when even batch size 1 does not fit.
    """
    start = max(1, min(start, cap))
    if fits(start):
        good, bad = start, None
        while bad is None and good < cap:
            nxt = min(good * 2, cap)
            if fits(nxt):
                good = nxt
            else:
                bad = nxt
        if bad is None:
            return good  # reached the cap
    else:
        good, bad = None, start
        b = start // 2
        while b >= 1:
            if fits(b):
                good = b
                break
            bad = b
            b //= 2
        if good is None:
            return None
    while bad - good > max(1, good // 16):
        mid = (good + bad) // 2
        if fits(mid):
            good = mid
        else:
            bad = mid
    return good
