//! Placeholder until the wheel bench lands.
fn main() {}
