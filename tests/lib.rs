//! shared e2e helpers
