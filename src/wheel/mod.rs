//! TEMPORARY STAND-IN: the wheel helper replaces this whole module (same public API).
#![allow(missing_docs, unreachable_pub)]

use std::collections::BTreeMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Key {
    index: u32,
    generation: u32,
}

impl Key {
    pub fn to_u64(self) -> u64 {
        (u64::from(self.generation) << 32) | u64::from(self.index)
    }
    pub fn from_u64(raw: u64) -> Key {
        Key { index: raw as u32, generation: (raw >> 32) as u32 }
    }
}

#[derive(Debug)]
pub struct Wheel<T> {
    now: u64,
    seq: u32,
    map: BTreeMap<(u64, u32), T>,
    keys: std::collections::HashMap<u32, u64>,
}

impl<T> Default for Wheel<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Wheel<T> {
    pub fn new() -> Self {
        Wheel { now: 0, seq: 0, map: BTreeMap::new(), keys: Default::default() }
    }
    pub fn now(&self) -> u64 {
        self.now
    }
    pub fn len(&self) -> usize {
        self.map.len()
    }
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
    pub fn insert(&mut self, deadline: u64, value: T) -> Key {
        self.seq += 1;
        self.map.insert((deadline, self.seq), value);
        self.keys.insert(self.seq, deadline);
        Key { index: self.seq, generation: 1 }
    }
    pub fn remove(&mut self, key: Key) -> Option<T> {
        let d = self.keys.remove(&key.index)?;
        self.map.remove(&(d, key.index))
    }
    pub fn next_expiration(&self) -> Option<u64> {
        self.map.keys().next().map(|k| k.0.max(self.now))
    }
    pub fn poll_expired(&mut self, now: u64, out: &mut Vec<T>) {
        self.now = self.now.max(now);
        while let Some(e) = self.map.first_entry() {
            if e.key().0 > self.now {
                break;
            }
            let ((_, s), v) = e.remove_entry();
            self.keys.remove(&s);
            out.push(v);
        }
    }
    pub fn shrink_to_fit(&mut self) {}
}
