"""The exact plan search's questions about sets of ops, as bit masks and memoised: a set's
memory under the union rule, its critical path, its down-sets within a device's memory, and
whether the unplaced ops still fit (NOTE: [Plan enumeration] in :mod:`._enumerate`)."""

from __future__ import annotations

from typing import Sequence

__all__ = ["Tables"]


class Tables:
    """The problem's fixed figures as bit masks (bit v: op v), and the memoised questions the
    search asks of a set of ops: its memory, critical path, down-sets, and where ops still fit."""

    def __init__(
        self,
        w: Sequence[float],
        preds: Sequence[Sequence[int]],
        op_bytes: Sequence[int],
        reads: Sequence[Sequence[int]],
        tensor_bytes: Sequence[int],
        capacity: Sequence[int],
    ) -> None:
        """The fields of the same names of :class:`~partitioner.accelerator._enumerate.EnumInput`."""
        n = self.n = len(w)
        self.devices = len(capacity)
        self.w, self.preds, self.capacity, self.op_bytes = w, preds, capacity, op_bytes
        self.pred_mask = [sum(1 << u for u in ps) for ps in preds]
        self.read_mask = [sum(1 << t for t in rs) for rs in reads]
        self.user_mask = [sum(1 << v for v in range(n) if u in preds[v]) for u in range(n)]
        self.tbytes = tensor_bytes
        self.memo_memory: dict[int, int] = {}
        self.memo_critical: dict[int, float] = {}
        self.memo_downsets: dict[tuple[int, int, int], list[int]] = {}
        self.memo_fits: dict[tuple[int, tuple[int, ...], tuple[int, ...]], bool] = {}
        self.memo_bits: dict[int, list[int]] = {}
        self.memo_room: dict[tuple[int, int], int] = {}
        self.memo_open: dict[tuple[bool, ...], list[int]] = {}

    def bits_of(self, mask: int) -> list[int]:
        got = self.memo_bits.get(mask)
        if got is None:
            got = self.memo_bits[mask] = [v for v in range(self.n) if mask >> v & 1]
        return got

    def room(self, d: int, held: int) -> int:
        """The ops that device d, holding ``held``, could still take one at a time."""
        got = self.memo_room.get((d, held))
        if got is None:
            memory, cap = self.memory, self.capacity[d]
            got = sum(1 << v for v in range(self.n) if memory(held | 1 << v) <= cap)
            self.memo_room[(d, held)] = got
        return got

    def memory(self, ops: int) -> int:
        """Bytes a device holding ``ops`` stores: their totals and every tensor they read from
        elsewhere, once."""
        got = self.memo_memory.get(ops)
        if got is None:
            tbytes, read_mask, op_bytes = self.tbytes, self.read_mask, self.op_bytes
            reads = 0
            got = 0
            for v in self.bits_of(ops):
                got += op_bytes[v]
                reads |= read_mask[v]
            reads &= ~ops
            got += sum(tbytes[t] for t in range(len(tbytes)) if reads >> t & 1)
            self.memo_memory[ops] = got
        return got

    def sent_bytes(self, mask: int) -> int:
        tbytes = self.tbytes
        return sum(tbytes[u] for u in self.bits_of(mask))

    def critical(self, ops: int) -> float:
        """The longest path through ``ops`` (their run time as one partition)."""
        got = self.memo_critical.get(ops)
        if got is None:
            preds, w = self.preds, self.w
            longest = [0.0] * self.n
            got = 0.0
            for v in self.bits_of(ops):
                m = 0.0
                for u in preds[v]:
                    if ops >> u & 1 and longest[u] > m:
                        m = longest[u]
                longest[v] = m + w[v]
                if longest[v] > got:
                    got = longest[v]
            self.memo_critical[ops] = got
        return got

    def downsets(self, rest: int, held: int, cap: int) -> list[int]:
        """Every non-empty down-set of the unplaced ops ``rest`` that a device holding ``held``
        can take within ``cap`` bytes."""
        key = (rest, held, cap)
        found = self.memo_downsets.get(key)
        if found is not None:
            return found
        found = []
        order, pred_mask, memory = self.bits_of(rest), self.pred_mask, self.memory

        def grow(i: int, chosen: int) -> None:
            if i == len(order):
                if chosen:
                    found.append(chosen)
                return
            v = order[i]
            grow(i + 1, chosen)
            if pred_mask[v] & rest & ~chosen:  # an unplaced input left out
                return
            if memory(held | chosen | 1 << v) <= cap:  # memory only grows with more ops
                grow(i + 1, chosen | 1 << v)

        grow(0, 0)
        self.memo_downsets[key] = found
        return found

    def open_devices(self, dev_ops: tuple[int, ...]) -> list[int]:
        """The used devices and, of the unused, the first of each memory (it stands for the others)."""
        used = tuple(bool(ops) for ops in dev_ops)
        got = self.memo_open.get(used)
        if got is None:
            capacity = self.capacity
            got = self.memo_open[used] = [
                d
                for d in range(self.devices)
                if used[d] or not any(not used[e] and capacity[e] == capacity[d] for e in range(d))
            ]
        return got

    def fits(self, rest: int, dev_ops: tuple[int, ...], may: tuple[int, ...]) -> bool:
        """Whether the ops of ``rest`` can go to devices within their memory, op v to device d
        only where bit v of ``may[d]`` is set (memoised)."""
        if not rest:
            return True
        key = (rest, dev_ops, may)
        got = self.memo_fits.get(key)
        if got is None:
            v = (rest & -rest).bit_length() - 1
            got = False
            for d in self.open_devices(dev_ops):
                grown = dev_ops[d] | 1 << v
                if may[d] >> v & 1 and self.room(d, dev_ops[d]) >> v & 1:
                    if self.fits(rest & ~(1 << v), dev_ops[:d] + (grown,) + dev_ops[d + 1 :], may):
                        got = True
                        break
            self.memo_fits[key] = got
        return got
