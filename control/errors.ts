/**
 * The error catalogue: one stable code per failure the daemon, API, CLI or config loader can
 * report (UVS_ERR_<AREA>_<WHAT>), with its HTTP status. docs/errors.md lists every code; a test
 * checks that the two agree.
 */
export const ERRORS = {
  UVS_ERR_CONFIG_INVALID: { status: 400, message: 'configuration is invalid' },
  UVS_ERR_CONFIG_READ: { status: 400, message: 'configuration file cannot be read' },
  UVS_ERR_CONFIG_UNSUPPORTED: { status: 400, message: 'configuration asks for something this uvs does not do' },
  UVS_ERR_API_NOT_FOUND: { status: 404, message: 'no such resource' },
  UVS_ERR_API_BAD_REQUEST: { status: 400, message: 'request is invalid' },
  UVS_ERR_API_CONFLICT: { status: 409, message: 'the service or real server already exists' },
  UVS_ERR_API_UNAUTHORIZED: { status: 401, message: 'missing or wrong bearer token' },
  UVS_ERR_API_HOST: { status: 403, message: 'the Host header does not name this listener' },
  UVS_ERR_API_CONTENT_TYPE: { status: 415, message: 'request bodies must be application/json' },
  UVS_ERR_API_TOO_LARGE: { status: 413, message: 'the request asks for more than the limits allow' },
  UVS_ERR_API_INTERNAL: { status: 500, message: 'internal error' },
  UVS_ERR_CAPTURE_BUSY: { status: 409, message: 'a capture is already running' },
  UVS_ERR_DATAPLANE_SETUP: { status: 500, message: 'dataplane setup failed' },
  UVS_ERR_TUN: { status: 500, message: 'TUN device operation failed' },
  UVS_ERR_MAINTENANCE_UNAVAILABLE: { status: 409, message: 'this node announces nothing, so maintenance cannot withdraw it' },
} as const;

export type ErrorCode = keyof typeof ERRORS;

export class UvsError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  /** Where the problem is (a config path like services[0].realServers[1].weight), if anywhere. */
  readonly path: string | undefined;

  constructor(code: ErrorCode, detail: string, path?: string) {
    super(path ? `${path}: ${detail}` : detail);
    this.code = code;
    this.status = ERRORS[code].status;
    this.path = path;
  }

  toJSON(): { code: string; message: string; path?: string } {
    return this.path ? { code: this.code, message: this.message, path: this.path } : { code: this.code, message: this.message };
  }
}
