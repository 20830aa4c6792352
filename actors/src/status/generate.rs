//! Condition generators. TO BE WRITTEN.
