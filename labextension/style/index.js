import './base.css';
import './pipeline.css';
import './gpu.css';
import './jobs.css';
import './schedules.css';
