mod adversary_periodic;
mod dynamic;
mod fixed;
mod periodic_cancel;
mod periodic_lifecycle;
mod reset;
