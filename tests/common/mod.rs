//! Helpers shared by the end-to-end tests (each test file is its own crate and uses what it
//! needs, hence the `dead_code` allowance).

#![allow(dead_code)]

pub mod seeded;
