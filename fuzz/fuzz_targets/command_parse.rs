//! The command table on arbitrary argument lists (NUL separates arguments): parsing, key
//! positions and class refinement never panic, keys are real arguments, and a refusal is
//! worded on one line.
#![no_main]

use bytes::Bytes;
use holdfast::command::Command;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let args: Vec<Bytes> = data
        .split(|b| *b == 0)
        .take(64)
        .map(Bytes::copy_from_slice)
        .collect();
    match Command::parse(args.clone()) {
        Ok(command) => {
            for key in command.keys() {
                assert!(args.iter().skip(1).any(|a| a == key), "a key must be an argument");
            }
            let _ = command.spec.class_of(&command.args);
            let _ = command.spec.nil_is_array(command.args.len());
        }
        Err(e) => {
            let text = e.reply();
            assert!(text.starts_with("ERR "), "{text}");
        }
    }
});
