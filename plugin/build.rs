// The commit this binary is built from (MESHSCOPE_COMMIT): see the file included.
include!("../scripts/build-commit.rs");
