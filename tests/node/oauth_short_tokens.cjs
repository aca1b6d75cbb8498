// A remote MCP server that signs in with OAuth and whose access tokens live TOKEN_SECS
// seconds (default 2), built on the official TypeScript SDK's own auth pieces: its
// authorization server router (`mcpAuthRouter`: metadata, dynamic registration, authorize,
// token with PKCE) and its bearer check (`requireBearerAuth`). It approves every
// authorization at once (a browser stand-in just follows the redirect) and gives a refresh
// token with each access token. One port (MCP_PORT) serves both: the MCP endpoint at /mcp
// and the authorization server at /. `GET /stats` answers how many tokens it issued by
// code and by refresh (so a test can tell a refresh without the user from a new sign-in),
// and how many POSTs reached /mcp (so it can tell that a client stopped trying).
// Its `publish` tool needs the scope `mcp:write`, which the server does not name up front:
// a call with a token without it gets a 403 `insufficient_scope` naming it (a step-up).
// With BARE_401=1, a request with no token gets a 401 with no `WWW-Authenticate` header.
// Run by tests/it/oauth.rs with NODE_PATH set to the npm dependencies scripts/test installs.
'use strict';
const { randomUUID } = require('node:crypto');
const { McpServer } = require('@modelcontextprotocol/sdk/server/mcp.js');
const { StreamableHTTPServerTransport } = require('@modelcontextprotocol/sdk/server/streamableHttp.js');
const { createMcpExpressApp } = require('@modelcontextprotocol/sdk/server/express.js');
const { mcpAuthRouter, getOAuthProtectedResourceMetadataUrl } = require('@modelcontextprotocol/sdk/server/auth/router.js');
const { requireBearerAuth } = require('@modelcontextprotocol/sdk/server/auth/middleware/bearerAuth.js');
const { InvalidGrantError, InvalidTokenError } = require('@modelcontextprotocol/sdk/server/auth/errors.js');
const z = require('zod/v4');

const port = parseInt(process.env.MCP_PORT, 10);
const tokenSecs = parseInt(process.env.TOKEN_SECS || '2', 10);
const base = new URL(`http://localhost:${port}`);
const mcpUrl = new URL('/mcp', base);
const stats = { byCode: 0, byRefresh: 0, rejected: 0, posts: 0, stepUps: 0 };
const writeScope = 'mcp:write';

const clients = new Map();
const codes = new Map();
const tokens = new Map();
const refreshTokens = new Map();

function issue(clientId, scopes, resource) {
  const token = randomUUID();
  const refresh = randomUUID();
  tokens.set(token, { clientId, scopes, resource, expiresAt: Date.now() + tokenSecs * 1000 });
  refreshTokens.set(refresh, { clientId, scopes, resource });
  return {
    access_token: token,
    token_type: 'bearer',
    expires_in: tokenSecs,
    refresh_token: refresh,
    scope: scopes.join(' '),
  };
}

const provider = {
  clientsStore: {
    async getClient(id) { return clients.get(id); },
    async registerClient(client) { clients.set(client.client_id, client); return client; },
  },
  async authorize(client, params, res) {
    if (!client.redirect_uris.includes(params.redirectUri)) {
      throw new InvalidGrantError('unregistered redirect_uri');
    }
    const code = randomUUID();
    codes.set(code, { client, params });
    const target = new URL(params.redirectUri);
    target.searchParams.set('code', code);
    if (params.state !== undefined) target.searchParams.set('state', params.state);
    res.redirect(target.toString());
  },
  async challengeForAuthorizationCode(_client, code) {
    const data = codes.get(code);
    if (!data) throw new InvalidGrantError('unknown code');
    return data.params.codeChallenge;
  },
  async exchangeAuthorizationCode(client, code) {
    const data = codes.get(code);
    if (!data || data.client.client_id !== client.client_id) throw new InvalidGrantError('unknown code');
    codes.delete(code);
    stats.byCode += 1;
    return issue(client.client_id, data.params.scopes || [], data.params.resource);
  },
  async exchangeRefreshToken(client, refresh) {
    const data = refreshTokens.get(refresh);
    if (!data || data.clientId !== client.client_id) throw new InvalidGrantError('unknown refresh token');
    refreshTokens.delete(refresh);
    stats.byRefresh += 1;
    return issue(client.client_id, data.scopes, data.resource);
  },
  async verifyAccessToken(token) {
    const data = tokens.get(token);
    if (!data || data.expiresAt < Date.now()) {
      stats.rejected += 1;
      throw new InvalidTokenError('expired or unknown token');
    }
    return {
      token,
      clientId: data.clientId,
      scopes: data.scopes,
      expiresAt: Math.floor(data.expiresAt / 1000),
      resource: data.resource,
    };
  },
};

const app = createMcpExpressApp();
app.use(mcpAuthRouter({ provider, issuerUrl: base, resourceServerUrl: mcpUrl, scopesSupported: ['mcp:tools'] }));
app.get('/stats', (_req, res) => res.json(stats));
const auth = requireBearerAuth({
  verifier: provider,
  resourceMetadataUrl: getOAuthProtectedResourceMetadataUrl(mcpUrl),
});

function server() {
  const s = new McpServer({ name: 'short-tokens', version: '1.0.0' });
  s.registerTool('greet', { description: 'Greets someone', inputSchema: { name: z.string() } },
    async ({ name }) => ({ content: [{ type: 'text', text: `Hello, ${name}!` }] }));
  s.registerTool('publish', { description: 'Publishes a note (needs mcp:write)', inputSchema: { text: z.string() } },
    async ({ text }) => ({ content: [{ type: 'text', text: `Published: ${text}` }] }));
  return s;
}

// A token without `mcp:write` is refused `publish`, with the scope it lacks.
function stepUp(req, res, next) {
  const call = req.body && req.body.method === 'tools/call' && req.body.params;
  const data = tokens.get((req.headers.authorization || '').replace(/^Bearer /i, ''));
  if (call && call.name === 'publish' && data && !data.scopes.includes(writeScope)) {
    stats.stepUps += 1;
    const metadata = getOAuthProtectedResourceMetadataUrl(mcpUrl);
    res.set('WWW-Authenticate',
      `Bearer error="insufficient_scope", scope="mcp:tools ${writeScope}", resource_metadata="${metadata}"`);
    return res.status(403).json({ error: 'insufficient_scope', error_description: 'publish needs mcp:write' });
  }
  next();
}

function bare401(req, res, next) {
  if (process.env.BARE_401 === '1' && !req.headers.authorization) return res.status(401).end();
  next();
}

app.post('/mcp', (_req, _res, next) => { stats.posts += 1; next(); }, bare401, auth, stepUp, async (req, res) => {
  const s = server();
  const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
  res.on('close', () => { transport.close(); s.close(); });
  await s.connect(transport);
  await transport.handleRequest(req, res, req.body);
});
app.get('/mcp', auth, (_req, res) => res.status(405).end());
app.delete('/mcp', auth, (_req, res) => res.status(405).end());

app.listen(port, '127.0.0.1', () => console.log(`listening on ${port}`));
