"""Planning, pure: a pool's observed state, its policy and the clock in; each knob's decision and its reason out."""
