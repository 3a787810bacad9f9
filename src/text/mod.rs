//! Text processing: Weibo-aware normalization and jieba segmentation with token weights.

pub mod memo;
pub mod normalize;
pub mod tokenize;
