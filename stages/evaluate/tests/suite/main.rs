//! Integration tests of `cwm-stage-evaluate`, in one test binary so that burn and arrow are
//! linked once, not once per file.

mod bins_select;
mod evaluate;
