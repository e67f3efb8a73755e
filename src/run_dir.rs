//! Run directories.
