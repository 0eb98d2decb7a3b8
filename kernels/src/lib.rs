//! KIVI math.
