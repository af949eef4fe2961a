mod adversary_edges;
mod cancel;
mod futures;
mod runs;
mod saturation;
