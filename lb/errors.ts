/**
 * Errors the dataplane reports to its owner. Codes are entries of the catalogue in
 * control/errors.ts (the dataplane does not import the control plane).
 */
export type DataplaneErrorCode = 'UVS_ERR_DATAPLANE_SETUP' | 'UVS_ERR_TUN';

export class DataplaneError extends Error {
  readonly code: DataplaneErrorCode;
  constructor(code: DataplaneErrorCode, message: string) {
    super(message);
    this.code = code;
  }
}
