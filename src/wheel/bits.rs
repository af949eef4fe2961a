//! The bit arithmetic of the wheel, as tiny free functions.
//!
//! Ground rules:
//! - A tick is a `u64`. Level `l` cuts a tick into 6-bit digits; digit `l` (bits `6l .. 6l + 6`)
//!   is the slot the tick falls in at level `l`.
//! - An entry lives at the level of the highest digit in which its deadline differs from the
//!   wheel's current tick (`elapsed`). So an entry at level `l` shares every digit above `l` with
//!   `elapsed`, and its digit `l` is greater than `elapsed`'s.
//! - Nothing here allocates, loops over slots or can overflow: every shift amount is `< 64`.

/// Bits of a tick consumed by one level: 6, so a level has 64 slots and its occupancy is exactly
/// one `u64` bitmap (find the next occupied slot with one rotate and one `trailing_zeros`).
pub(crate) const LEVEL_BITS: u32 = 6;

/// Slots per level (`2^LEVEL_BITS` = 64).
pub(crate) const SLOTS: usize = 1 << LEVEL_BITS;

/// Mask selecting one slot digit.
const SLOT_MASK: u64 = SLOTS as u64 - 1;

/// Number of levels: 11 levels of 6 bits cover 66 bits, more than the 64 of a `u64` tick, so
/// every deadline up to `u64::MAX` has a level and the wheel needs no overflow list. The top level
/// only ever uses its first 16 slots (bits 60..64). At a 1 ms tick level 0 spans 64 ms, level 3
/// about 4.7 hours, level 6 about 8.9 years and level 10 the rest of the `u64` range.
pub(crate) const NUM_LEVELS: usize = 11;

/// The level at which an entry due at `deadline` lives while the wheel stands at `elapsed`: the
/// index of the highest 6-bit digit in which the two differ, or 0 when they are equal.
pub(crate) fn level_for(elapsed: u64, deadline: u64) -> usize {
    // OR-ing the slot mask makes equal ticks (and ticks differing only in digit 0) land on level 0
    // and keeps `leading_zeros` below 64.
    let masked = (elapsed ^ deadline) | SLOT_MASK;
    let significant = 63 - masked.leading_zeros();
    (significant / LEVEL_BITS) as usize
}

/// The slot (digit) of `tick` at `level`.
pub(crate) fn slot_for(tick: u64, level: usize) -> usize {
    debug_assert!(level < NUM_LEVELS);
    ((tick >> shift(level)) & SLOT_MASK) as usize
}

/// The first occupied slot at or after `from` in `bitmap`, wrapping past slot 63 to slot 0; `None`
/// when the bitmap is empty. One rotate and one `trailing_zeros`, no scan.
pub(crate) fn next_occupied(bitmap: u64, from: usize) -> Option<usize> {
    debug_assert!(from < SLOTS);
    if bitmap == 0 {
        return None;
    }
    // Rotate so that slot `from` sits at bit 0; the lowest set bit is then the distance to it.
    let distance = bitmap.rotate_right(from as u32).trailing_zeros() as usize;
    Some((from + distance) % SLOTS)
}

/// The first tick covered by `slot` of `level` inside the level block that holds `elapsed` (the
/// block is the 64 slots sharing `elapsed`'s digits above `level`).
///
/// The wheel only asks for slots after `elapsed`'s own, which always lie inside `u64`: a deadline
/// at that slot exists, and the slot starts no later than it.
pub(crate) fn slot_start(elapsed: u64, level: usize, slot: usize) -> u64 {
    debug_assert!(slot < SLOTS);
    block_start(elapsed, level) | ((slot as u64) << shift(level))
}

/// `elapsed` with every digit at `level` and below cleared: the start of its level block.
fn block_start(elapsed: u64, level: usize) -> u64 {
    let bits = shift(level) + LEVEL_BITS;
    // The top level's block is the whole `u64` range (bits >= 64): a plain shift would overflow.
    match u64::MAX.checked_shl(bits) {
        Some(mask) => elapsed & mask,
        None => 0,
    }
}

/// Bit offset of `level`'s digit.
fn shift(level: usize) -> u32 {
    level as u32 * LEVEL_BITS
}

#[cfg(all(test, not(wheelpool_loom)))]
mod tests {
    use super::*;

    #[test]
    fn levels_cover_every_u64_tick() {
        assert!(NUM_LEVELS as u32 * LEVEL_BITS >= 64);
        assert!((NUM_LEVELS as u32 - 1) * LEVEL_BITS < 64);
        assert_eq!(level_for(0, u64::MAX), NUM_LEVELS - 1);
        assert_eq!(level_for(u64::MAX, 0), NUM_LEVELS - 1);
    }

    #[test]
    fn level_for_equal_ticks_is_zero() {
        for t in [0, 1, 63, 64, 4095, 1 << 40, u64::MAX - 1, u64::MAX] {
            assert_eq!(level_for(t, t), 0, "tick {t}");
        }
    }

    #[test]
    fn level_for_every_level_boundary() {
        for level in 0..NUM_LEVELS {
            let bit = level as u32 * LEVEL_BITS;
            // A deadline whose lowest bit of digit `level` differs from `elapsed = 0`.
            assert_eq!(level_for(0, 1 << bit), level, "first bit of level {level}");
            // The highest bit of the digit (or bit 63 on the short top level).
            let top = (bit + LEVEL_BITS - 1).min(63);
            assert_eq!(level_for(0, 1 << top), level, "last bit of level {level}");
            // Everything below the next level's first bit stays at or below this level.
            if bit + LEVEL_BITS < 64 {
                assert_eq!(level_for(0, (1 << (bit + LEVEL_BITS)) - 1), level);
            }
        }
    }

    #[test]
    fn level_for_depends_on_the_highest_differing_digit() {
        // 63 -> 64 crosses into a new level-1 slot: level 1 even though they are 1 tick apart.
        assert_eq!(level_for(63, 64), 1);
        assert_eq!(level_for(64, 127), 0);
        assert_eq!(level_for(4095, 4096), 2);
        assert_eq!(level_for(u64::MAX - 1, u64::MAX), 0);
        assert_eq!(level_for(u64::MAX - 64, u64::MAX), 1);
        assert_eq!(level_for(1 << 60, u64::MAX), 10, "bits 61..64 differ");
        assert_eq!(level_for(1 << 60, (1 << 61) - 1), 9);
        assert_eq!(level_for((1 << 60) - 1, 1 << 60), 10);
    }

    #[test]
    fn level_for_matches_a_slow_reference() {
        let reference = |a: u64, b: u64| -> usize {
            (0..NUM_LEVELS)
                .rev()
                .find(|&l| (a >> (l as u32 * LEVEL_BITS)) != (b >> (l as u32 * LEVEL_BITS)))
                .unwrap_or(0)
        };
        let mut x = 0x9E37_79B9_7F4A_7C15_u64;
        for _ in 0..10_000 {
            // xorshift: cheap deterministic spread of values, with masks for small distances.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let a = x.rotate_left(17);
            let b = a ^ (x >> (x % 64));
            assert_eq!(level_for(a, b), reference(a, b), "{a} {b}");
        }
    }

    #[test]
    fn slot_for_reads_the_digit() {
        assert_eq!(slot_for(0, 0), 0);
        assert_eq!(slot_for(63, 0), 63);
        assert_eq!(slot_for(64, 0), 0);
        assert_eq!(slot_for(64, 1), 1);
        assert_eq!(slot_for(4095, 1), 63);
        assert_eq!(slot_for(4096, 2), 1);
        assert_eq!(slot_for(u64::MAX, 0), 63);
        assert_eq!(slot_for(u64::MAX, 9), 63);
        assert_eq!(
            slot_for(u64::MAX, 10),
            15,
            "top level only has 16 reachable slots"
        );
        assert_eq!(slot_for(1 << 60, 10), 1);
        for level in 0..NUM_LEVELS {
            for slot in 0..SLOTS as u64 {
                let tick = slot << (level as u32 * LEVEL_BITS);
                if tick >> (level as u32 * LEVEL_BITS) == slot {
                    assert_eq!(slot_for(tick, level), slot as usize);
                }
            }
        }
    }

    #[test]
    fn next_occupied_every_from_and_bit() {
        assert_eq!(next_occupied(0, 0), None);
        assert_eq!(next_occupied(0, 63), None);
        for bit in 0..SLOTS {
            for from in 0..SLOTS {
                // A single bit is always found, wrapping if it is before `from`.
                assert_eq!(
                    next_occupied(1 << bit, from),
                    Some(bit),
                    "bit {bit} from {from}"
                );
            }
        }
    }

    #[test]
    fn next_occupied_takes_the_nearest_at_or_after_from() {
        let bitmap = (1 << 3) | (1 << 10) | (1 << 63);
        assert_eq!(next_occupied(bitmap, 0), Some(3));
        assert_eq!(next_occupied(bitmap, 3), Some(3));
        assert_eq!(next_occupied(bitmap, 4), Some(10));
        assert_eq!(next_occupied(bitmap, 11), Some(63));
        assert_eq!(next_occupied(bitmap, 63), Some(63));
        assert_eq!(next_occupied(u64::MAX, 17), Some(17));
        assert_eq!(next_occupied(1, 63), Some(0));
    }

    #[test]
    fn slot_start_within_the_block_of_elapsed() {
        assert_eq!(slot_start(0, 0, 5), 5);
        assert_eq!(slot_start(70, 0, 10), 74);
        assert_eq!(slot_start(70, 1, 2), 128);
        assert_eq!(slot_start(5000, 1, 63), 4096 + 63 * 64);
        assert_eq!(slot_start(5000, 2, 3), 3 * 4096);
        assert_eq!(slot_start(0, 10, 15), 15 << 60);
        assert_eq!(slot_start(u64::MAX - 5, 0, 63), u64::MAX);
        assert_eq!(slot_start(u64::MAX - 200, 1, 63), u64::MAX - 63);
        // The top level's block is all of u64: elapsed's high bits do not leak in.
        assert_eq!(slot_start(3 << 60, 10, 7), 7 << 60);
    }

    #[test]
    fn slot_start_is_never_after_a_deadline_in_that_slot() {
        let mut x = 0x2545_F491_4F6C_DD1D_u64;
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let elapsed = x >> (x % 64);
            let deadline = elapsed.saturating_add(x.rotate_left(23) >> (x % 61));
            let level = level_for(elapsed, deadline);
            let slot = slot_for(deadline, level);
            let start = slot_start(elapsed, level, slot);
            assert!(start <= deadline, "{elapsed} {deadline}");
            if deadline > elapsed {
                assert!(start > elapsed, "{elapsed} {deadline}");
                assert!(slot > slot_for(elapsed, level));
                // The slot is one slot span wide.
                let span_bits = level as u32 * LEVEL_BITS;
                assert_eq!(deadline >> span_bits, start >> span_bits);
            }
        }
    }
}
