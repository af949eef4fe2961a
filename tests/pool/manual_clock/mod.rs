mod advance;
mod adversary_manual;
mod adversary_model;
mod lateness;
