//! Local process command runner. TO BE WRITTEN.
