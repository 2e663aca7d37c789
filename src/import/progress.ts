// A one-line progress bar on stderr for long imports, only when stderr is a terminal.
export class Progress {
  private bytes = 0;
  private rows = 0;
  private readonly started = Date.now();
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly label: string,
    private readonly totalBytes: number,
    enabled: boolean,
  ) {
    if (enabled) this.timer = setInterval(() => this.draw(), 250);
  }

  addBytes(n: number): void {
    this.bytes += n;
  }
  addRow(): void {
    this.rows++;
  }

  private draw(): void {
    const fraction = this.totalBytes > 0 ? Math.min(1, this.bytes / this.totalBytes) : 0;
    const width = 30;
    const filled = Math.round(fraction * width);
    const seconds = (Date.now() - this.started) / 1000;
    const rate = seconds > 0 ? Math.round(this.rows / seconds) : 0;
    process.stderr.write(
      `\r${this.label} [${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${(fraction * 100).toFixed(0).padStart(3)}%  ${this.rows.toLocaleString('en')} rows  ${rate.toLocaleString('en')}/s `,
    );
  }

  stage(text: string): void {
    if (!this.timer) return;
    this.draw();
    process.stderr.write(`\n${text}…\n`);
    clearInterval(this.timer);
    this.timer = undefined;
  }

  stop(): void {
    if (this.timer) {
      this.draw();
      process.stderr.write('\n');
      clearInterval(this.timer);
      this.timer = undefined;
    }
  }
}
