//! memstore
