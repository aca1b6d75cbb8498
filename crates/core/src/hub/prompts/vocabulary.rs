//! The `o200k_base` vocabulary that counts tokens ([`super::inject`]), embedded compressed.
//!
//! tiktoken-rs embeds it as base64 text; the binary carries it instead as each token's bytes
//! in rank order, each after a one-byte length, compressed with zstd
//! (`assets/o200k_base.bin.zst`, made by `scripts/make-vocabulary`): a quarter of the size.
//! It is unpacked when the first count needs it.

use tiktoken_rs::{CoreBPE, Rank};

/// The packed vocabulary.
const PACKED: &[u8] = include_bytes!("../../../assets/o200k_base.bin.zst");
/// How many tokens it holds, to size the map before filling it.
const TOKENS: usize = 199_998;

/// The `o200k_base` encoder, as tiktoken-rs makes it, from the packed vocabulary.
pub fn o200k_base() -> CoreBPE {
    let bytes = zstd::decode_all(PACKED).expect("the embedded vocabulary unpacks");
    let mut tokens = Vec::with_capacity(TOKENS);
    let mut rest = bytes.as_slice();
    while let Some((&len, tail)) = rest.split_first() {
        let (token, tail) = tail.split_at(usize::from(len));
        tokens.push((token.to_vec(), tokens.len() as Rank));
        rest = tail;
    }
    let specials = [
        (tiktoken_rs::ENDOFTEXT.to_string(), 199_999),
        (tiktoken_rs::ENDOFPROMPT.to_string(), 200_018),
    ];
    CoreBPE::new(
        tokens.into_iter().collect(),
        specials.into_iter().collect(),
        tiktoken_rs::O200K_BASE_PAT_STR,
    )
    .expect("the embedded vocabulary makes an encoder")
}

#[cfg(test)]
mod tests {
    /// The packed vocabulary counts as tiktoken-rs's own does, on text of every kind.
    #[test]
    fn the_packed_vocabulary_counts_as_tiktoken_does() {
        let ours = super::o200k_base();
        let theirs = tiktoken_rs::o200k_base().unwrap();
        let texts = [
            "Always run `cargo fmt` before committing.",
            "fn main() {\n    println!(\"héllo, wörld — 你好 🌍\");\n}\n",
            "<|endoftext|> and <|endofprompt|> are special",
            "   leading spaces\ttabs\r\nand CRLF",
            "Ünïcödé, Кириллица, العربية, हिन्दी, 日本語のテキスト",
        ];
        for text in texts {
            assert_eq!(
                ours.encode_with_special_tokens(text),
                theirs.encode_with_special_tokens(text),
                "{text:?}"
            );
        }
        let long: String = texts.concat().repeat(50);
        assert_eq!(ours.encode_ordinary(&long), theirs.encode_ordinary(&long));
    }
}
