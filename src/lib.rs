//! wheelpool: a scheduled thread pool whose delays live in a hierarchical timing wheel and whose
//! due tasks run on a work-stealing pool.

#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod wheel;

#[allow(dead_code)]
mod sync;
