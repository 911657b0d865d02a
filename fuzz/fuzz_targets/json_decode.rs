//! Fuzzes the OTLP/JSON decoder for every signal: it must never panic, and whatever it
//! accepts must survive encode → decode unchanged (NaN aside, which is not equal to itself).
#![no_main]

use libfuzzer_sys::fuzz_target;
use weir::otlp::json::{decode, encode};
use weir::signal::Signal;

fuzz_target!(|data: &[u8]| {
    for signal in Signal::ALL {
        if let Ok(payload) = decode(signal, data) {
            let text = encode(&payload);
            let again = decode(signal, text.as_bytes()).expect("canonical output decodes");
            assert_eq!(encode(&again), text, "canonical encoding is stable");
        }
    }
});
