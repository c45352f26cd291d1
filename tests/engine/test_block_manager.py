"""The block manager keeps its books straight, and every sequence reads back exactly its own tokens.

The state machine drives a BlockManager with random allocate / append / fork / free / swap /
speculate operations over a tiny alphabet (so prefix-cache hits and evictions happen all the time), and
stands in for the KV cache with a list of token ids per block: every write goes through the slot
mapping and every copy-on-write or swap copies those lists, exactly as the engine moves K/V.
A speculative step reserves lookahead slots, writes the newest token and k drafts into them, keeps
the accepted ones and trims the rest (Scheduler._roll_back's two calls), so rejected drafts stay
behind in slots that must never be read as anyone's tokens nor cached.
"""
from __future__ import annotations

from collections import Counter

import pytest

pytest.importorskip("hypothesis")     # a machine without it (the GPU box) skips this module

import hypothesis.strategies as st  # noqa: E402
from hypothesis import settings  # noqa: E402
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule  # noqa: E402

from engine.core.block_manager import BlockManager, hash_block
from engine.core.block_pool import BlockPool, FreeBlockQueue

BS, NUM_BLOCKS, NUM_SWAP = 2, 12, 8
tokens = st.lists(st.integers(0, 1), min_size=1, max_size=9)


class BlockManagerMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.bm = BlockManager(NUM_BLOCKS, BS, enable_prefix_caching=True, num_swap_blocks=NUM_SWAP)
        self.gpu = [[None] * BS for _ in range(NUM_BLOCKS)]     # what each KV slot holds
        self.cpu = [[None] * BS for _ in range(NUM_SWAP)]
        self.seqs: dict[int, list[int]] = {}                    # owner -> its tokens (all computed)
        self.swapped: dict[int, list[int]] = {}
        self.hashed: dict[int, tuple[int, ...]] = {}            # block hash -> the prefix it stands for
        self.next_id = 0

    def _write(self, owner: int, start: int, copies) -> None:
        for src, dst in copies:                                 # copy-on-write happens before the writes
            self.gpu[dst] = list(self.gpu[src])
        table = self.bm.block_ids(owner)
        for pos in range(start, len(self.seqs[owner])):
            self.gpu[table[pos // BS]][pos % BS] = self.seqs[owner][pos]
        self.bm.cache_full_blocks(owner, self.seqs[owner], len(self.seqs[owner]))
        toks = self.seqs[owner]
        for i, h in enumerate(self.bm.tables[owner].block_hashes):
            self.hashed[h] = tuple(toks[:(i + 1) * BS])

    @rule(toks=tokens)
    def add(self, toks):
        owner, self.next_id = self.next_id, self.next_id + 1
        hit = self.bm.find_cached_prefix(toks)
        assert hit.num_tokens < len(toks)                       # the last token is always recomputed
        copies = self.bm.allocate_slots(owner, hit.num_tokens, len(toks) - hit.num_tokens, hit)
        if copies is None:
            assert owner not in self.bm.tables
            return
        self.seqs[owner] = list(toks)
        self._write(owner, hit.num_tokens, copies)

    @precondition(lambda self: self.seqs)
    @rule(data=st.data(), token=st.integers(0, 1))
    def append(self, data, token):
        owner = data.draw(st.sampled_from(sorted(self.seqs)))
        n = len(self.seqs[owner])
        copies = self.bm.allocate_slots(owner, n, 1)
        if copies is None:
            return
        self.seqs[owner].append(token)
        self._write(owner, n, copies)

    @precondition(lambda self: self.seqs)
    @rule(data=st.data(), token=st.integers(0, 1), drafts=st.lists(st.integers(0, 1), min_size=1, max_size=5))
    def speculate(self, data, token, drafts):
        owner = data.draw(st.sampled_from(sorted(self.seqs)))
        accepted = data.draw(st.integers(0, len(drafts)))
        n = len(self.seqs[owner])
        copies = self.bm.allocate_slots(owner, n, 1, num_lookahead_tokens=len(drafts))
        if copies is None:
            assert len(self.bm.block_ids(owner)) == -(-n // BS)       # a failed reservation changes nothing
            return
        table = self.bm.block_ids(owner)
        assert len(table) == -(-(n + 1 + len(drafts)) // BS)          # a slot for the token and every draft
        for src, dst in copies:
            self.gpu[dst] = list(self.gpu[src])
        for i, t in enumerate([token] + drafts):                     # the verify pass writes them all
            pos = n + i
            self.gpu[table[pos // BS]][pos % BS] = t
        self.seqs[owner] += [token] + drafts[:accepted]              # ... and keeps the accepted run
        toks = self.seqs[owner]
        self.bm.cache_full_blocks(owner, toks, len(toks))
        self.bm.trim(owner, len(toks))
        for i, h in enumerate(self.bm.tables[owner].block_hashes):
            self.hashed[h] = tuple(toks[:(i + 1) * BS])

    @precondition(lambda self: self.seqs)
    @rule(data=st.data())
    def fork(self, data):
        parent = data.draw(st.sampled_from(sorted(self.seqs)))
        child, self.next_id = self.next_id, self.next_id + 1
        self.bm.fork(parent, child)
        self.seqs[child] = list(self.seqs[parent])

    @precondition(lambda self: self.seqs or self.swapped)
    @rule(data=st.data())
    def free(self, data):
        owner = data.draw(st.sampled_from(sorted(self.seqs) + sorted(self.swapped)))
        self.bm.free(owner)
        self.seqs.pop(owner, None)
        self.swapped.pop(owner, None)

    @precondition(lambda self: self.seqs)
    @rule(data=st.data())
    def swap_out(self, data):
        owner = data.draw(st.sampled_from(sorted(self.seqs)))
        pairs = self.bm.swap_out(owner)
        if pairs is None:
            return
        for gpu, cpu in pairs:
            self.cpu[cpu] = list(self.gpu[gpu])
        self.swapped[owner] = self.seqs.pop(owner)

    @precondition(lambda self: self.swapped)
    @rule(data=st.data())
    def swap_in(self, data):
        owner = data.draw(st.sampled_from(sorted(self.swapped)))
        if not self.bm.can_swap_in(owner, len(self.swapped[owner])):
            return
        for cpu, gpu in self.bm.swap_in(owner):
            self.gpu[gpu] = list(self.cpu[cpu])
        self.seqs[owner] = self.swapped.pop(owner)

    @invariant()
    def books_balance(self):
        state = self.bm.state()
        owners = Counter(b for table in state.tables.values() for b in table)
        for block in state.blocks:
            assert block.ref_count == owners[block.block_id]           # ref counts equal owners
            assert (block.free_rank is None) == (block.ref_count > 0)  # a block is free xor in use
        for table in state.tables.values():
            assert len(set(table)) == len(table)                       # no block twice in one table
        used = sum(1 for b in state.blocks if b.ref_count > 0)
        assert state.num_free + used == state.num_blocks               # free + used = total
        assert len(state.free_order) == state.num_free
        swap_used = [b for t in state.swapped.values() for b in t]
        assert len(set(swap_used)) == len(swap_used)
        assert len(swap_used) + len(self.bm.swap_free) == NUM_SWAP

    @invariant()
    def every_sequence_reads_its_own_tokens(self):
        for owner, toks in self.seqs.items():
            table = self.bm.block_ids(owner)
            assert len(table) == -(-len(toks) // BS)
            assert [self.gpu[table[p // BS]][p % BS] for p in range(len(toks))] == toks

    @invariant()
    def cached_blocks_hold_what_their_hash_says(self):
        for h, block_id in self.bm.pool.cached.items():
            prefix = self.hashed[h]
            assert self.gpu[block_id] == list(prefix[-BS:])
            assert self.bm.pool.block_hash[block_id] == h


TestBlockManagerMachine = BlockManagerMachine.TestCase
TestBlockManagerMachine.settings = settings(max_examples=80, stateful_step_count=40, deadline=None)


def test_free_queue_removes_from_the_middle_and_keeps_order():
    q = FreeBlockQueue(5)
    q.remove(2)
    q.remove(0)
    q.append(2)
    assert q.order() == [1, 3, 4, 2] and len(q) == 4 and 0 not in q
    assert q.popleft() == 1 and q.order() == [3, 4, 2]


def test_freed_cached_blocks_are_reused_then_evicted_in_lru_order():
    bm = BlockManager(6, 2, enable_prefix_caching=True)
    a, b = [1, 2, 3, 4, 9], [5, 6, 7, 8, 9]
    for owner, toks in (("a", a), ("b", b)):
        bm.allocate_slots(owner, 0, len(toks))
        bm.cache_full_blocks(owner, toks, len(toks))
    bm.free("a")                       # a's blocks are freed first: least recently used
    bm.free("b")
    hit = bm.find_cached_prefix(b)
    assert hit.num_tokens == 4          # b is still fully cached after it finished
    # Free order is a's blocks (tail first), then b's. Two new blocks take a's unhashed tail block
    # and then evict the least recently used cached block: a's *last* full one (tails go first).
    bm.allocate_slots("c", 0, 3)
    assert bm.find_cached_prefix(a).num_tokens == 2
    assert bm.find_cached_prefix(b).num_tokens == 4
    # Reusing b from the cache takes its blocks out of the middle of the free queue.
    bm.allocate_slots("b2", 4, 1, bm.find_cached_prefix(b))
    assert bm.block_ids("b2")[:2] == hit.block_ids
    assert all(bm.pool.ref_count[x] == 1 for x in hit.block_ids)


def test_trim_gives_back_the_blocks_of_rejected_drafts():
    bm = BlockManager(8, 4)
    bm.allocate_slots("a", 0, 6)                              # 6 tokens: 2 blocks
    bm.allocate_slots("a", 6, 1, num_lookahead_tokens=6)      # the newest + 6 drafts: positions 6..12, 4 blocks
    assert len(bm.block_ids("a")) == 4 and bm.num_free_blocks == 4
    bm.trim("a", 9)                           # the newest, 1 kept draft and the token after: 9 tokens, 3 blocks
    assert len(bm.block_ids("a")) == 3 and bm.num_free_blocks == 5
    bm.free("a")
    assert bm.num_free_blocks == 8


def test_hash_is_chained_over_the_whole_prefix():
    first = hash_block(None, [1, 2])
    assert hash_block(first, [3, 4]) != hash_block(hash_block(None, [9, 9]), [3, 4])
    assert hash_block(first, [3, 4]) == hash_block(hash_block(None, [1, 2]), [3, 4])


def test_pool_without_caching_never_registers():
    pool = BlockPool(2, enable_caching=False)
    b = pool.allocate()
    pool.register(b, 123, (None, (1, 2)))
    assert pool.lookup(123, (None, (1, 2))) is None and not pool.cached
