//! A gRPC codec that passes message bytes through: the receiver checks request bytes
//! with [`super::wire`] instead of decoding them, and the `otlp` exporter sends batches
//! as the bytes they arrived in.

use bytes::{BufMut, Bytes};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::Status;

/// Encodes and decodes `Bytes` as they are.
#[derive(Debug, Clone, Copy, Default)]
pub struct BytesCodec;

impl Codec for BytesCodec {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = BytesCodec;
    type Decoder = BytesCodec;

    fn encoder(&mut self) -> Self::Encoder {
        BytesCodec
    }
    fn decoder(&mut self) -> Self::Decoder {
        BytesCodec
    }
}

impl Encoder for BytesCodec {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for BytesCodec {
    type Item = Bytes;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        use bytes::Buf;
        // Splits the frame off tonic's buffer: no copy.
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

/// A message as the pieces it is made of (the requests a batch appended), written into
/// tonic's buffer piece by piece, so a batch is copied once on its way out, not joined
/// first.
#[derive(Debug, Clone, Default)]
pub struct Pieces(pub Vec<Bytes>);

/// The `otlp` exporter's codec: sends [`Pieces`], reads the reply as bytes.
#[derive(Debug, Clone, Copy, Default)]
pub struct PiecesCodec;

impl Codec for PiecesCodec {
    type Encode = Pieces;
    type Decode = Bytes;
    type Encoder = PiecesCodec;
    type Decoder = BytesCodec;

    fn encoder(&mut self) -> Self::Encoder {
        PiecesCodec
    }
    fn decoder(&mut self) -> Self::Decoder {
        BytesCodec
    }
}

impl Encoder for PiecesCodec {
    type Item = Pieces;
    type Error = Status;

    fn encode(&mut self, item: Pieces, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        for p in &item.0 {
            dst.put_slice(p);
        }
        Ok(())
    }
}
