//! [`Key`]: the handle [`Wheel::insert`](super::Wheel::insert) returns.

/// A handle to one entry of a [`Wheel`](super::Wheel): the slab index of the node that holds
/// it.
///
/// A key names its entry until the entry fires or is removed. After that the node may be given
/// to a newer entry, which the same key then reaches: so [`Wheel::remove`](super::Wheel::remove)
/// asks the caller to recognise its entry by its value, and removes nothing else. (The pool
/// clears a task's key under the shard's lock whenever the task leaves the wheel, and checks
/// the value's identity besides.)
///
/// [`Key::to_u32`] packs a key into a `u32`, for example to keep it in an `AtomicU32`. A key
/// returned by `insert` never packs to `u32::MAX`, so that can stand for "no key".
///
/// # Examples
///
/// ```
/// use wheelpool::wheel::{Key, Wheel};
///
/// let mut wheel = Wheel::new();
/// let key = wheel.insert(10, "hello");
/// let raw = key.to_u32();
/// assert_ne!(raw, u32::MAX);
/// assert_eq!(Key::from_u32(raw), key);
/// assert_eq!(wheel.remove(Key::from_u32(raw), |v| *v == "hello"), Some("hello"));
/// // The entry is gone: removing again finds nothing.
/// assert_eq!(wheel.remove(key, |v| *v == "hello"), None);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    pub(super) index: u32,
}

impl Key {
    /// The key as a `u32` (the slab index).
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::wheel::Wheel;
    ///
    /// let mut wheel = Wheel::new();
    /// assert_ne!(wheel.insert(1, ()).to_u32(), u32::MAX);
    /// ```
    #[must_use]
    pub fn to_u32(self) -> u32 {
        self.index
    }

    /// The key [`Key::to_u32`] packed. Any `u32` is accepted: one that names no occupied node
    /// makes `remove` return `None`.
    ///
    /// # Examples
    ///
    /// ```
    /// use wheelpool::wheel::{Key, Wheel};
    ///
    /// let mut wheel: Wheel<u8> = Wheel::new();
    /// assert_eq!(Key::from_u32(u32::MAX).to_u32(), u32::MAX);
    /// assert_eq!(wheel.remove(Key::from_u32(0), |_| true), None);
    /// ```
    #[must_use]
    pub fn from_u32(raw: u32) -> Key {
        Key { index: raw }
    }
}
