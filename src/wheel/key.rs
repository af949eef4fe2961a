//! [`Key`]: the handle [`Wheel::insert`](super::Wheel::insert) returns.

/// A handle to one entry of a [`Wheel`](super::Wheel): the entry's slab index and the generation
/// of that slab node when the entry was inserted.
///
/// A key stays valid until its entry fires or is removed. After that it is *stale*: the node may
/// hold another entry, but with another generation, so [`Wheel::remove`](super::Wheel::remove)
/// with a stale key returns `None` and never touches that other entry. (A stale key could only
/// match again after the same node has been reused 2^32 - 1 times.)
///
/// [`Key::to_u64`] packs a key losslessly into a `u64`, for example to keep it in an `AtomicU64`.
/// A key returned by `insert` never packs to `0` nor to `u64::MAX`, so either can stand for "no
/// key".
///
/// # Examples
///
/// ```
/// use wheelpool::wheel::{Key, Wheel};
///
/// let mut wheel = Wheel::new();
/// let key = wheel.insert(10, "hello");
/// let raw = key.to_u64();
/// assert_ne!(raw, 0);
/// assert_eq!(Key::from_u64(raw), key);
/// assert_eq!(wheel.remove(Key::from_u64(raw)), Some("hello"));
/// // The key is stale now: removing again finds nothing.
/// assert_eq!(wheel.remove(key), None);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    pub(super) index: u32,
    pub(super) generation: u32,
}

impl Key {
    /// Packs the key into a `u64`: generation in the high 32 bits, slab index in the low 32.
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::wheel::Wheel;
    ///
    /// let mut wheel = Wheel::new();
    /// let raw = wheel.insert(1, ()).to_u64();
    /// assert!(raw != 0 && raw != u64::MAX);
    /// ```
    #[must_use]
    pub fn to_u64(self) -> u64 {
        (u64::from(self.generation) << 32) | u64::from(self.index)
    }

    /// Unpacks a key packed by [`Key::to_u64`]. Any `u64` is accepted: one that no `insert`
    /// returned simply names no entry, and `remove` with it returns `None`.
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::wheel::{Key, Wheel};
    ///
    /// let mut wheel: Wheel<u8> = Wheel::new();
    /// assert_eq!(Key::from_u64(u64::MAX).to_u64(), u64::MAX);
    /// assert_eq!(wheel.remove(Key::from_u64(0)), None);
    /// ```
    #[must_use]
    pub fn from_u64(raw: u64) -> Key {
        Key {
            index: raw as u32,
            generation: (raw >> 32) as u32,
        }
    }
}

#[cfg(all(test, not(wheelpool_loom)))]
mod tests {
    use super::*;

    #[test]
    fn round_trips_losslessly() {
        for raw in [
            0,
            1,
            u64::from(u32::MAX),
            1 << 32,
            u64::MAX,
            0xDEAD_BEEF_0BAD_F00D,
        ] {
            assert_eq!(Key::from_u64(raw).to_u64(), raw);
        }
        let key = Key {
            index: 7,
            generation: 3,
        };
        assert_eq!(key.to_u64(), (3 << 32) | 7);
        assert_eq!(Key::from_u64(key.to_u64()), key);
    }
}
