//! MCP face
