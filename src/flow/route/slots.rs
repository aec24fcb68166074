//! A route table's drain slots: one per route identity, each holding the
//! identity's drain signal once a connection takes it, laid out in blocks
//! that the next table of a reload shares while it carries enough of
//! them ([`KEEP_BLOCK_FRACTION`]), and which of a table's signals its
//! successor does not carry ([`RouteTable::retired_by`]).
//!
//! Not here: what an identity is and how a table finds one (the parent,
//! [`super`]: `RouteTable::build`), or what a signal does when fired
//! ([`crate::drain`]).

use std::collections::HashSet;
use std::sync::{Arc, OnceLock};

use super::{RouteEntry, RouteTable};
use crate::config::Backend;
use crate::drain::DrainSignal;

/// A route identity's drain signal, made when the first connection takes
/// the identity (or when a reload retires it): most names of a long list
/// never see a connection in a generation's life, and a signal costs some
/// 200 bytes (its cancellation token's node included) where the empty
/// slot costs 16. A reload that keeps the identity hands the slot itself
/// on (its [`SlotBlock`] is shared), so a signal made under either table is
/// the same one.
#[derive(Debug, Default)]
pub(crate) struct DrainSlot(OnceLock<Arc<DrainSignal>>);

/// The drain slots one table build made fresh, in one allocation: a
/// reload that changes every name frees the previous block whole, where
/// one allocation per slot left its 32-byte blocks among what the parse
/// had freed and kept those pages resident (benches/README.md, "Names").
pub(super) type SlotBlock = Arc<[DrainSlot]>;

/// Where a pattern's slot is: its block among the table's, and its place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct SlotAt {
    pub(super) block: u32,
    pub(super) index: u32,
}

/// A previous table's block is kept by the next one while at least one
/// slot in this many of it is carried; below that, its carried slots move
/// to the new block (each with its signal made, so that both tables hold
/// the same one), and the block goes with the previous table: an old
/// block never outlives its use by more than this factor.
pub(super) const KEEP_BLOCK_FRACTION: usize = 16;

impl DrainSlot {
    /// The identity's signal, made on first use.
    pub(crate) fn signal(&self) -> &Arc<DrainSignal> {
        self.0.get_or_init(DrainSignal::new)
    }

    /// Registers a connection on the identity (see
    /// [`DrainSignal::enter`]), making the signal if it is the first.
    pub(crate) fn enter(&self) -> crate::drain::DrainGuard {
        self.signal().enter()
    }

    /// Whether the signal was made and has fired.
    pub(super) fn is_fired(&self) -> bool {
        self.0.get().is_some_and(|signal| signal.is_fired())
    }
}

impl RouteTable {
    /// The drain signals of `self` that `next` (the same listener's next
    /// table, or `None` when the listener is gone) does not carry on: the
    /// connections on them must drain. A slot no connection has taken yet
    /// gets its signal now, so that one taking it later (still routed by
    /// this table) joins the signal about to fire.
    pub(crate) fn retired_by(&self, next: Option<&RouteTable>) -> Vec<Arc<DrainSignal>> {
        // Carried: the same slot (in a block both tables share, marked in
        // a flag per slot of each shared block: no hashing of 100,000
        // pointers when a reload keeps every name; the fallback's own
        // `Arc`), or a slot
        // moved out of a sparse block, which holds the same signal as the
        // one it carries.
        let mut marks: Vec<Vec<bool>> = Vec::new();
        let mut moved: HashSet<*const DrainSignal> = HashSet::new();
        let mut fallback: Vec<*const DrainSlot> = Vec::new();
        // Per block of `self`: its place among `next`'s blocks, if shared.
        let mut shared: Vec<Option<usize>> = vec![None; self.blocks.len()];
        if let Some(next) = next {
            let theirs: Vec<Option<usize>> = next
                .blocks
                .iter()
                .map(|n| self.blocks.iter().position(|b| Arc::ptr_eq(b, n)))
                .collect();
            for (at, mine) in theirs.iter().enumerate() {
                if let Some(mine) = mine {
                    shared[*mine] = Some(at);
                }
            }
            marks = next
                .blocks
                .iter()
                .zip(&theirs)
                .map(|(block, mine)| vec![false; if mine.is_some() { block.len() } else { 0 }])
                .collect();
            for &at in next.slots.iter() {
                match marks[at.block as usize].get_mut(at.index as usize) {
                    Some(mark) => *mark = true,
                    None => moved.extend(next.slot(at).0.get().map(Arc::as_ptr)),
                }
            }
            for slot in next.fallback_slots() {
                fallback.push(slot);
                moved.extend(slot.0.get().map(Arc::as_ptr));
            }
        }
        let carried_by_signal = |slot: &DrainSlot| {
            slot.0
                .get()
                .is_some_and(|s| moved.contains(&Arc::as_ptr(s)))
        };
        let patterns = self.slots.iter().filter(|at| {
            let slot = self.slot(**at);
            let marked = shared[at.block as usize].is_some_and(|b| marks[b][at.index as usize]);
            !marked && !carried_by_signal(slot)
        });
        let patterns = patterns.map(|&at| self.slot(at));
        let fallbacks = self.fallback_slots().filter(|slot| {
            !fallback.contains(&(*slot as *const DrainSlot)) && !carried_by_signal(slot)
        });
        patterns
            .chain(fallbacks)
            .map(|slot| slot.signal().clone())
            .collect()
    }

    /// The slot at `at`.
    pub(super) fn slot(&self, at: SlotAt) -> &DrainSlot {
        &self.blocks[at.block as usize][at.index as usize]
    }

    /// The no-SNI fallback's slots (its own and its ECH identity's).
    pub(super) fn fallback_slots(&self) -> impl Iterator<Item = &DrainSlot> {
        self.no_sni
            .iter()
            .flat_map(|f| std::iter::once(&*f.drain).chain(f.diverted.as_deref()))
    }
}

/// The previous identity's slot when it led to an equal backend and its
/// signal has not been fired; a fresh one otherwise.
pub(super) fn carried(
    previous: Option<(&RouteEntry, &Arc<DrainSlot>)>,
    backend: &Arc<Backend>,
) -> Arc<DrainSlot> {
    match previous {
        Some((was, slot)) if *was.backend == **backend && !slot.is_fired() => slot.clone(),
        _ => Arc::default(),
    }
}

/// The previous identity's slot (where it is in `previous`) when it led to
/// an equal backend and its signal has not been fired; `None` (a fresh
/// slot) otherwise.
pub(super) fn carried_at(
    previous: Option<&RouteTable>,
    kept: Option<(&RouteEntry, SlotAt)>,
    backend: &Arc<Backend>,
) -> Option<SlotAt> {
    let (was, at) = kept?;
    let previous = previous?;
    (*was.backend == **backend && !previous.slot(at).is_fired()).then_some(at)
}

/// Lays out a new table's slots: `plan` holds, per slot, the previous
/// table's slot it carries or `None` for a fresh one. A previous block
/// that enough of `plan` carries ([`KEEP_BLOCK_FRACTION`]) is shared with
/// the previous table; the slots carried from any other one move into the
/// new block with their signal made first (the previous table's slot and
/// the new one then hold the same signal). Fresh slots go in the new
/// block too, which is last.
pub(super) fn place_slots(
    previous: Option<&RouteTable>,
    plan: Vec<Option<SlotAt>>,
) -> (Box<[SlotAt]>, Box<[SlotBlock]>) {
    let old_blocks: &[SlotBlock] = previous.map_or(&[], |p| &p.blocks);
    let mut carried = vec![0usize; old_blocks.len()];
    for at in plan.iter().flatten() {
        carried[at.block as usize] += 1;
    }
    let mut blocks: Vec<SlotBlock> = Vec::new();
    let mut new_index: Vec<Option<u32>> = vec![None; old_blocks.len()];
    for (i, block) in old_blocks.iter().enumerate() {
        if carried[i] > 0 && carried[i] * KEEP_BLOCK_FRACTION >= block.len() {
            new_index[i] = Some(blocks.len() as u32);
            blocks.push(block.clone());
        }
    }
    let fresh_block = blocks.len() as u32;
    let mut fresh: Vec<DrainSlot> = Vec::new();
    let slots = plan
        .into_iter()
        .map(|at| {
            let moved = match at {
                Some(at) => match new_index[at.block as usize] {
                    Some(block) => {
                        return SlotAt {
                            block,
                            index: at.index,
                        };
                    }
                    None => {
                        let signal = old_blocks[at.block as usize][at.index as usize].signal();
                        DrainSlot(OnceLock::from(signal.clone()))
                    }
                },
                None => DrainSlot::default(),
            };
            fresh.push(moved);
            SlotAt {
                block: fresh_block,
                index: (fresh.len() - 1) as u32,
            }
        })
        .collect();
    if !fresh.is_empty() {
        blocks.push(fresh.into());
    }
    (slots, blocks.into_boxed_slice())
}
